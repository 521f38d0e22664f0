package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/dnsmsg"
	"github.com/plumb-dev/plumb/pcap/dnspair"
	"github.com/plumb-dev/plumb/pcap/dnsrec"
)

func dnsCommand() command {
	return command{
		name:  "dns",
		usage: "[-o OUT.arrow] [--pairs] CAPTURE",
		short: "extract the DNS messages (or, with --pairs, transactions) of a capture into an Arrow file, as builtin:dns (builtin:dnspairs) does",
		run: func(ctx context.Context, fs *flag.FlagSet, args []string) error {
			out := fs.String("o", "", "Arrow IPC `FILE` to write (default: count only)")
			instance := fs.String("instance", "local", "instance (site) written in each row")
			seq := fs.Uint64("seq", 0, "sequence number written in each row")
			pairs := fs.Bool("pairs", false, "write one row per transaction (query and response paired), as builtin:dnspairs")
			sectionsFlag := fs.String("sections", "all", "record `SECTIONS` read: all, question (none), or answer,authority,additional; the others are null, as builtin:dns?sections=")
			files, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(files) != 1 {
				return errUsage
			}
			sections, err := dnsmsg.ParseSections(*sectionsFlag)
			if err != nil {
				return err
			}
			f, err := os.Open(files[0])
			if err != nil {
				return err
			}
			defer f.Close()
			r, closer, err := pcap.NewReader(f)
			if err != nil {
				return fmt.Errorf("%s: %w", files[0], err)
			}
			defer closer.Close()
			// Without -o only the counts are wanted: no Arrow file is built
			// (it used to be built and compressed into io.Discard).
			var of *os.File
			if *out != "" {
				if of, err = os.Create(*out); err != nil {
					return err
				}
				defer of.Close()
			}
			var (
				werr   error
				emit   func(*dnsrec.Record)
				closeW = func() error { return nil }
				pairer *dnspair.Pairer
			)
			if *pairs {
				var w *dnspair.Writer
				if *out != "" {
					if w, err = dnspair.NewWriter(of, *instance, *seq); err != nil {
						return err
					}
					defer w.Close()
					closeW = w.Close
				}
				pairer = dnspair.New(func(t *dnspair.Txn) {
					if w != nil && werr == nil {
						werr = w.Add(t)
					}
				})
				emit = pairer.Add
			} else {
				var w *dnsrec.Writer
				if *out != "" {
					if w, err = dnsrec.NewWriter(of, *instance, *seq); err != nil {
						return err
					}
					w.SetSections(sections)
					defer w.Close() // ends its writer on early returns
					closeW = w.Close
				}
				emit = func(rec *dnsrec.Record) {
					if w != nil && werr == nil {
						werr = w.Add(rec)
					}
				}
			}
			x := dnsrec.NewExtractor(r.LinkType, nil, emit)
			if !*pairs {
				x.ReadSections(sections) // pairing keeps the answers
			}
			start := time.Now()
			for n := 0; ; n++ {
				if n%65536 == 0 && ctx.Err() != nil {
					return ctx.Err()
				}
				data, ci, err := r.Next()
				if err == io.EOF || errors.Is(err, pcap.ErrTruncated) {
					if err != io.EOF {
						fmt.Fprintf(os.Stderr, "warning: %s: %v; the last record was dropped\n", files[0], err)
					}
					break
				}
				if err != nil {
					return fmt.Errorf("%s: %w", files[0], err)
				}
				x.Packet(ci.Timestamp, data)
				if werr != nil {
					return werr
				}
			}
			x.Flush()
			if pairer != nil {
				pairer.Flush()
			}
			werr = errors.Join(werr, closeW())
			if werr != nil {
				return werr
			}
			if of != nil {
				if err := of.Close(); err != nil {
					return err
				}
			}
			st := x.Stats()
			secs := time.Since(start).Seconds()
			fmt.Fprintf(os.Stderr, "%d packets, %d DNS messages (%d UDP, %d TCP, %d malformed) in %.2fs: %.0f packets/s\n",
				st.Packets, st.Messages, st.UDP, st.TCP, st.Malformed, secs, float64(st.Packets)/secs)
			if pairer != nil {
				ps := pairer.Stats()
				fmt.Fprintf(os.Stderr, "%d transactions: %s\n", ps.Answered+ps.Unanswered+ps.Orphans+ps.Evicted, ps)
			}
			return nil
		},
	}
}
