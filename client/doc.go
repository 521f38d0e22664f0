// Package client is the Go client of a Plumb server: upload blocks, read
// them by name, as a consumer group with acknowledgements, as complete
// windows or as one site's ordered stream with a cursor, and read the rows
// of Arrow queues as record batches.
//
// It imports the protocol (package flight), arrow-go and grpc, and none of
// the server: a consumer built on it stays small.
package client
