// Package server is Plumb's server: the Arrow Flight service (uploads,
// block, window, stream and records reads, actions) and its composition
// with the engine, the dashboard, retention and fsck, which Run wires
// together for `plumb serve`. It is the only place where errors become
// gRPC status codes. Clients reach it through package client, and both
// speak package flight.
package server
