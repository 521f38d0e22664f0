// Command consumer writes each block of a queue to a file, acknowledging
// it once written: a Plumb consumer built from package client alone.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log"
	"os"
	"os/signal"

	"github.com/plumb-dev/plumb/client"
)

func main() {
	addr := flag.String("server", "127.0.0.1:8815", "Plumb server")
	queue, group := flag.String("queue", "pcap.sz", "queue to read"), flag.String("group", "files", "consumer group")
	once := flag.Bool("once", false, "stop when no block is owed instead of waiting for more")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.DialSecure(*addr, client.Security{TokenFile: os.Getenv("PLUMB_TOKEN_FILE")})
	if err != nil {
		log.Fatal(err)
	}
	t := client.Ticket{Queue: *queue, Group: *group, From: client.FromEarliest, Follow: !*once}
	err = c.Consume(ctx, t, func(h client.Header, r io.Reader) error {
		f, err := os.Create(h.Name)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r) // fails if the bytes do not match their SHA-256
		return errors.Join(err, f.Close())
	})
	if err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
