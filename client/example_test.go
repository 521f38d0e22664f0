package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

// The examples run against real servers that TestMain starts: addr
// (plain) and tlsAddr (TLS, with users), with caFile and anaSecret.

// A consumer: read a queue as a consumer group and acknowledge each block
// once it is handled. A block not acknowledged (the program crashed, fn
// failed) is handed out again after the visibility timeout.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(addr) // e.g. "127.0.0.1:8815"
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// A block not acknowledged within five minutes goes to another reader.
	t := client.Ticket{Queue: "pcap.sz", Group: "archive", From: client.FromEarliest, Visibility: 5 * time.Minute}
	err = c.Consume(ctx, t, func(h client.Header, r io.Reader) error {
		n, err := io.Copy(io.Discard, r) // handle the block's bytes
		fmt.Println(h.Name, n, "bytes")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// 20250505-151105-00000001.lax.pcap.sz 13 bytes
	// 20250505-151605-00000002.lax.pcap.sz 13 bytes
	// 20250505-151105-00000001.ams.pcap.sz 13 bytes
}

func ExampleClient_Put() {
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// A block's name says its time, sequence number, site and queue.
	res, err := c.Put(context.Background(), client.BytesSource("20250506-000000-00000001.nyc.raw", []byte("some bytes")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0].Name, res[0].Status)
	// Output:
	// 20250506-000000-00000001.nyc.raw stored
}

func ExampleClient_Get() {
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.Get(context.Background(), "20250505-151105-00000001.lax.pcap.sz")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for s.Next() {
		b, err := io.ReadAll(s) // checked against the block's SHA-256 at its end
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %q\n", s.Header().Name, b)
	}
	if err := s.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 20250505-151105-00000001.lax.pcap.sz: "lax block one"
}

// Records reads the rows of a queue of Arrow blocks (such as dns.arrow)
// as one stream of record batches, filtered on the server.
func ExampleClient_Records() {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r, err := c.Records(ctx, client.RecordsTicket{
		Records: "names.arrow",
		Columns: []string{"qname", "rcode"},
		Filter:  []client.Condition{{Column: "rcode", Op: client.OpEq, Value: 3}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Release()
	var recs []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := r.Err(); err != nil {
		log.Fatal(err)
	}
	table := array.NewTableFromRecords(r.Schema(), recs)
	defer table.Release()
	fmt.Println(table.NumRows(), "rows:", table.Schema().Field(0).Name, table.Schema().Field(1).Name)
	for _, rec := range recs {
		fmt.Println(rec.Column(0).(*array.String).Value(0))
		rec.Release()
	}
	// Output:
	// 1 rows: qname rcode
	// nope.example.
}

// RecordsTable reads a selection small enough for memory into one
// table; Limit makes sure it is.
func ExampleClient_RecordsTable() {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	table, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "names.arrow", Columns: []string{"qname"}, Limit: 1000})
	if err != nil {
		log.Fatal(err)
	}
	defer table.Release()
	fmt.Println(table.NumRows(), "rows of", table.Schema().Field(0).Name)
	// Output:
	// 2 rows of qname
}

// RecordsSchema says which columns a records ticket reads, and refuses
// a ticket the server would, before any row moves.
func ExampleClient_RecordsSchema() {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	schema, err := c.RecordsSchema(ctx, client.RecordsTicket{Records: "names.arrow", Columns: []string{"rcode", "qname"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(schema.Field(0).Name, schema.Field(0).Type, schema.Field(1).Name, schema.Field(1).Type)
	_, err = c.RecordsSchema(ctx, client.RecordsTicket{Records: "names.arrow", Columns: []string{"nope"}})
	fmt.Println(status.Code(err))
	// Output:
	// rcode int64 qname utf8
	// InvalidArgument
}

// A window stream hands a consumer group each complete window of a
// queue once: its header (which blocks are present, missing, late), then
// its blocks.
func ExampleClient_WindowStream() {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	t := client.WindowTicket{Window: "pcap.sz", Group: "hourly",
		Spec: &client.WindowSpec{Size: "2", Instances: []string{"lax"}}} // every 2 blocks of lax
	s, err := c.WindowStream(ctx, t)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	s.OnEvent = func(meta []byte) {
		var h client.WindowHeader
		if json.Unmarshal(meta, &h) == nil {
			fmt.Printf("window %s of %s: present %v, missing %v\n", h.Window.ID, h.Instance, h.Present, h.Missing)
		}
	}
	for s.Next() {
		fmt.Println(" ", s.Header().Name)
		if _, err := c.Ack(ctx, "pcap.sz", "hourly", s.Header().Name); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// window lax/0 of lax: present [1 2], missing []
	//   20250505-151105-00000001.lax.pcap.sz
	//   20250505-151605-00000002.lax.pcap.sz
}

// A stream reads one site's blocks in sequence order with a cursor kept
// on the server, and a checkpoint saves the consumer's own state with it:
// a restarted consumer goes on from its last checkpoint.
func ExampleClient_Stream() {
	ctx := context.Background()
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(ctx, client.StreamTicket{Stream: "pcap.sz", Instance: "lax", Consumer: "ids"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	var total int64
	for s.Next() {
		n, err := io.Copy(io.Discard, s)
		if err != nil {
			log.Fatal(err)
		}
		total += n
		req := client.StreamRequest{Queue: "pcap.sz", Instance: "lax", Consumer: "ids",
			State: map[string]string{"bytes": fmt.Sprint(total)}}
		if err := c.StreamAction(ctx, flight.ActCheckpoint, req, nil); err != nil {
			log.Fatal(err)
		}
		fmt.Println(s.Header().Name, "checkpointed at", total, "bytes")
	}
	if err := s.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 20250505-151105-00000001.lax.pcap.sz checkpointed at 13 bytes
	// 20250505-151605-00000002.lax.pcap.sz checkpointed at 26 bytes
}

// DialSecure reaches a server over TLS that it verifies against a CA
// file, and logs in: the token the login returns goes with every call.
func ExampleDialSecure() {
	c, err := client.DialSecure(tlsAddr, client.Security{CAFile: caFile, User: "ana", Secret: anaSecret})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	qs, err := c.Queues(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(qs), "queues")
	_, err = c.Put(context.Background(), client.BytesSource("20250505-151105-00000001.lax.pcap.sz", []byte("x")))
	fmt.Println(strings.Contains(fmt.Sprint(err), "PermissionDenied"))
	// Output:
	// 0 queues
	// true
}

// Errors match the package's sentinels with errors.Is, whichever call
// they come from; their text stays the server's, naming what is wrong.
func ExampleErrNotFound() {
	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, err = c.Blocks(ctx, "no.such.queue")
	fmt.Println(errors.Is(err, client.ErrNotFound), errors.Is(err, client.ErrPermission))
	_, err = c.Put(ctx, client.BytesSource("20250505-151105-00000001.lax.conflict.sz", []byte("one")))
	fmt.Println(err)
	_, err = c.Put(ctx, client.BytesSource("20250505-151105-00000001.lax.conflict.sz", []byte("two")))
	fmt.Println(errors.Is(err, client.ErrConflict))
	_, err = c.Blocks(ctx, "../x")
	fmt.Println(errors.Is(err, client.ErrInvalid))
	// Output:
	// true false
	// <nil>
	// true
	// true
}

// Every failure matches a sentinel with errors.Is, whichever call it
// comes from: what the caller may not do, who they are not, a request
// too large, a server that is not there, a deadline passed.
func ExampleErrPermission() {
	ctx := context.Background()
	ana, err := client.DialSecure(tlsAddr, client.Security{CAFile: caFile, User: "ana", Secret: anaSecret})
	if err != nil {
		log.Fatal(err)
	}
	defer ana.Close()
	_, err = ana.Put(ctx, client.BytesSource("20250505-151105-00000001.lax.pcap.sz", []byte("x")))
	fmt.Println("ana puts a block:", errors.Is(err, client.ErrPermission))

	_, err = client.DialSecure(tlsAddr, client.Security{CAFile: caFile, User: "ana", Secret: "wrong"})
	fmt.Println("a wrong secret:", errors.Is(err, client.ErrUnauthenticated))

	c, err := client.Dial(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.Blocks(ctx, strings.Repeat("q", 100_000))
	fmt.Println("a 100 kB queue name:", errors.Is(err, client.ErrExhausted))

	soon, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = c.Consume(soon, client.Ticket{Queue: "pcap.sz", Group: "waits", From: client.FromLatest, Follow: true},
		func(client.Header, io.Reader) error { return nil })
	fmt.Println("a follow past its deadline:", errors.Is(err, client.ErrTimeout))

	gone, err := client.Dial("127.0.0.1:1")
	if err != nil {
		log.Fatal(err)
	}
	defer gone.Close()
	_, err = gone.Queues(ctx)
	fmt.Println("no server:", errors.Is(err, client.ErrUnavailable))
	// Output:
	// ana puts a block: true
	// a wrong secret: true
	// a 100 kB queue name: true
	// a follow past its deadline: true
	// no server: true
}
