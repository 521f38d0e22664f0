// Package countio counts the bytes that pass through readers, for
// progress and measurements read by other goroutines.
package countio

import (
	"io"
	"sync/atomic"
)

// Reader adds the bytes read from R to N.
type Reader struct {
	R io.Reader
	N *atomic.Int64
}

func (c *Reader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N.Add(int64(n))
	return n, err
}
