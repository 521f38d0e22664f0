// Command floor links what every Flight client in Go needs (grpc and
// arrow-go's Flight and IPC) and nothing else: the size a consumer built
// on package client is held to.
package main

import (
	"context"
	"os"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	conn, err := grpc.NewClient(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		os.Exit(1)
	}
	s, err := aflight.NewFlightServiceClient(conn).DoGet(context.Background(), &aflight.Ticket{Ticket: []byte(os.Args[2])})
	if err != nil {
		os.Exit(1)
	}
	r, err := aflight.NewRecordReader(s)
	if err != nil {
		os.Exit(1)
	}
	for r.Next() {
		os.Stdout.Write(r.LatestAppMetadata())
	}
}
