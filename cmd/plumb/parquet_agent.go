//go:build agent

package main

import (
	"context"
	"errors"
	"io"
)

// writeParquet is left out of the agent build: Parquet and the Arrow
// compute kernels it links are 18 MB of a 44 MB binary, which a capture
// site does not need to ship blocks.
var writeParquet func(ctx context.Context, r io.Reader, w io.Writer) error

var errNoParquet = errors.New("this is the agent build of plumb, which leaves Parquet out to stay small: write Arrow (-o FILE.arrow) or JSON lines (-o FILE.jsonl) here, or use the full plumb binary for Parquet")
