//go:build !agent

package main

import (
	"context"
	"io"

	"github.com/plumb-dev/plumb/stage"
	"github.com/plumb-dev/plumb/stage/builtin"
)

// writeParquet writes the Arrow IPC records read from r to w as
// Parquet, as builtin:parquet writes them.
var writeParquet = func(ctx context.Context, r io.Reader, w io.Writer) error {
	return (&builtin.Parquet{RowGroupRows: builtin.DefaultRowGroupRows}).Run(ctx, stage.Input{}, r, w)
}

// errNoParquet is never returned by the full binary.
var errNoParquet error
