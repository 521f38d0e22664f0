// Command records prints the rows of a records queue (dns.arrow, or any
// queue of Arrow blocks) as JSON lines, selected by columns and a row
// limit: a Plumb reader of tables built from package client alone.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/plumb-dev/plumb/client"
)

func main() {
	addr := flag.String("server", "127.0.0.1:8815", "Plumb server")
	queue := flag.String("records", "dns.arrow", "records queue to read")
	columns := flag.String("columns", "time,qname,rcode", "columns, separated by commas")
	limit := flag.Int64("limit", 100000, "at most this many rows")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.DialSecure(*addr, client.Security{TokenFile: os.Getenv("PLUMB_TOKEN_FILE")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	table, err := c.RecordsTable(ctx, client.RecordsTicket{Records: *queue, Columns: strings.Split(*columns, ","), Limit: *limit})
	if err != nil {
		log.Fatal(err)
	}
	defer table.Release()
	tr := array.NewTableReader(table, 0)
	defer tr.Release()
	for tr.Next() {
		if err := array.RecordToJSON(tr.RecordBatch(), os.Stdout); err != nil {
			log.Fatal(err)
		}
	}
}
