package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/pcap"
)

func streamCommand() command {
	var (
		instance, consumer, from, gapThen *string
		follow                            *bool
		gapWait                           *time.Duration
	)
	return clientCommand("stream", "QUEUE --instance SITE", "write one site's blocks in sequence order as one continuous capture on stdout", 1,
		func(fs *flag.FlagSet) {
			instance = fs.String("instance", "", "the site whose stream to read (required)")
			consumer = fs.String("consumer", "", "the stream `CONSUMER` whose cursor the server keeps (default: a temporary one, deleted at the end)")
			from = fs.String("from", "", "where to start: earliest, checkpoint, or a sequence number (default: checkpoint for a named consumer, which goes on after what it last wrote; earliest for a temporary one)")
			follow = fs.Bool("follow", false, "keep waiting for new blocks")
			gapWait = fs.Duration("gap-wait", 0, "at a missing block, wait this long (0: forever)")
			gapThen = fs.String("gap-then", "skip", "after --gap-wait: skip the missing block, or stop")
		},
		func(ctx context.Context, c *client.Client, args []string) error {
			if *instance == "" {
				return errUsage
			}
			// A typo in the queue or site must not read as an empty
			// capture piped into tcpdump or Zeek.
			queue, err := queueKnown(ctx, c, args[0])
			if err != nil {
				return err
			}
			site := queue
			if queue {
				// last-seq is an agent's call; a reader may not be allowed
				// it, and then the site is not checked.
				if ls, err := c.LastSeq(ctx, args[0], *instance); err == nil && !ls.Found {
					site = false
				}
			}
			switch {
			case !queue && !*follow:
				return fmt.Errorf("no queue %q (plumb queues lists those you may read)", args[0])
			case !site && !*follow:
				return fmt.Errorf("queue %q has no site %q (plumb site owners %s lists them)", args[0], *instance, args[0])
			case !site:
				fmt.Fprintf(os.Stderr, "plumb stream: queue %q has no block of site %q yet; waiting for its first\n", args[0], *instance)
			}
			named := *consumer != ""
			if !named {
				// A read that names no consumer must not leave one behind:
				// a cursor holds every block after it from retention.
				*consumer = fmt.Sprintf("tmp-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
				defer func() {
					dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					defer cancel()
					req := flight.StreamRequest{Queue: args[0], Instance: *instance, Consumer: *consumer}
					if err := c.StreamAction(dctx, flight.ActDeleteState, req, nil); err != nil {
						fmt.Fprintf(os.Stderr, "plumb stream: the temporary consumer %s was not deleted (%v); delete it with the delete-state action\n", *consumer, plainError(err))
					}
				}()
			}
			if *from == "" {
				// A named consumer checkpoints each block once written
				// (below), so it goes on from what it last wrote.
				*from = "checkpoint"
				if !named {
					*from = "earliest"
				}
			}
			t := flight.StreamTicket{Stream: args[0], Instance: *instance, Consumer: *consumer, Follow: *follow}
			t.From, _ = json.Marshal(*from)
			if *gapWait > 0 {
				t.Gap = &flight.GapPolicy{Wait: gapWait.String(), Then: *gapThen}
			}
			s, err := c.Stream(ctx, t)
			if err != nil {
				return err
			}
			defer s.Close()
			s.OnEvent = func(meta []byte) { fmt.Fprintf(os.Stderr, "plumb stream: %s\n", meta) }
			out := bufio.NewWriterSize(os.Stdout, 1<<20)
			// Each block is a capture (any codec); the stream is one
			// capture: the first block's header, then every packet.
			stream := pcap.NewConcat(out)
			for s.Next() {
				if _, err := stream.Append(s); errors.Is(err, pcap.ErrOtherLinkType) {
					return fmt.Errorf("block %s: %w; read it with plumb get", s.Header().Name, err)
				} else if err != nil {
					return fmt.Errorf("block %s: %w", s.Header().Name, err)
				}
				// Read to the block's end so its SHA-256 is checked.
				if _, err := io.Copy(io.Discard, s); err != nil {
					return err
				}
				if err := stream.Flush(); err != nil {
					return err
				}
				if named {
					// Written: the consumer's checkpoint moves past it. The
					// server's cursor runs ahead, past blocks sent and not
					// yet written, which a crash here would lose.
					if err := out.Flush(); err != nil {
						return err
					}
					n, err := block.Parse(s.Header().Name)
					if err != nil {
						return fmt.Errorf("the server sent block %q: %w", s.Header().Name, err)
					}
					req := flight.StreamRequest{Queue: args[0], Instance: *instance, Consumer: *consumer, Seq: n.Seq + 1}
					if err := c.StreamAction(ctx, flight.ActCheckpoint, req, nil); err != nil {
						return fmt.Errorf("block %s written, but the consumer's checkpoint was not saved: %w", n, err)
					}
				}
			}
			if err := s.Err(); err != nil {
				return err
			}
			if err := stream.Flush(); err != nil {
				return err
			}
			if !stream.Started() {
				// Caught up: still a capture, empty, for the tool it is
				// piped into (no block says the link type: Ethernet).
				w, err := pcap.NewWriter(out, layers.LinkTypeEthernet, 262144, false)
				if err == nil {
					err = w.Flush()
				}
				if err != nil {
					return err
				}
			}
			return out.Flush()
		})
}
