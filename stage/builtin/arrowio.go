package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/ipcguard"
	"github.com/plumb-dev/plumb/stage"
)

// The stages that read Arrow tables (anonymize, enrich, filter,
// dnsmetrics) read them through eachBatch, bounded the same way.

// maxRewriteArrow bounds an Arrow block read whole.
const maxRewriteArrow = 1 << 30

// rewriteArrow reads an Arrow IPC file whole (eachBatch) and writes each
// of its batches as the function plan returns for its schema makes it,
// under the schema plan returns.
func rewriteArrow(ctx context.Context, in io.Reader, out io.Writer,
	plan func(*arrow.Schema) (*arrow.Schema, func(arrow.RecordBatch) (arrow.RecordBatch, error), error), opts ...ipc.Option) error {
	var w *ipc.FileWriter
	var batch func(arrow.RecordBatch) (arrow.RecordBatch, error)
	err := eachBatch(ctx, in, func(in *arrow.Schema) error {
		schema, fn, err := plan(in)
		if err != nil {
			return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
		}
		batch = fn
		w, err = ipc.NewFileWriter(out, append(opts, ipc.WithSchema(schema))...)
		return err
	}, func(i int, rec arrow.RecordBatch) error {
		nrec, err := batch(rec)
		if err != nil {
			return fmt.Errorf("%w: batch %d: %v", stage.ErrMalformed, i, err)
		}
		defer nrec.Release()
		return w.Write(nrec)
	})
	if err != nil {
		return err
	}
	return w.Close()
}

// eachBatch reads an Arrow IPC file whole, within bounds (a larger one,
// or one that does not read, is malformed), tells schema its schema and
// hands each batch in turn to batch, which may not keep it unless it
// retains it.
func eachBatch(ctx context.Context, in io.Reader, schema func(*arrow.Schema) error, batch func(int, arrow.RecordBatch) error) error {
	data, err := io.ReadAll(io.LimitReader(in, maxRewriteArrow+1))
	if err != nil {
		return err
	}
	if len(data) > maxRewriteArrow {
		return fmt.Errorf("%w: an Arrow block over %d bytes", stage.ErrMalformed, maxRewriteArrow)
	}
	f, err := ipcguard.OpenFile(data, 256<<20)
	if err != nil {
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	defer f.Close()
	if err := schema(f.Schema()); err != nil {
		return err
	}
	for i := 0; i < f.NumRecords(); i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var rec arrow.RecordBatch
		if err := ipcguard.Under(func() (err error) { rec, err = f.RecordBatchAt(i); return err }); err != nil {
			return fmt.Errorf("%w: batch %d: %v", stage.ErrMalformed, i, err)
		}
		err := batch(i, rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// readWindow tells a window stage's input document from a block's bytes
// at the head of a run's input: ok with the window parsed, or rest
// giving back the block whole.
func readWindow(in io.Reader) (win stage.WindowInput, ok bool, rest io.Reader, err error) {
	head := make([]byte, len(stage.WindowInputPrefix))
	n, err := io.ReadFull(in, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return win, false, nil, err
	}
	rest = io.MultiReader(bytes.NewReader(head[:n]), in)
	if string(head[:n]) != stage.WindowInputPrefix {
		return win, false, rest, nil
	}
	doc, err := io.ReadAll(io.LimitReader(rest, maxWindowInput+1))
	if err != nil {
		return win, false, nil, err
	}
	if len(doc) > maxWindowInput {
		return win, false, nil, fmt.Errorf("%w: a window's input over %d bytes", stage.ErrMalformed, maxWindowInput)
	}
	if win, _, err = stage.ParseWindowInput(doc); err != nil {
		return win, false, nil, fmt.Errorf("%w: window input: %v", stage.ErrMalformed, err)
	}
	return win, true, nil, nil
}

// maxWindowInput bounds a window's input document (a line per block).
const maxWindowInput = 64 << 20
