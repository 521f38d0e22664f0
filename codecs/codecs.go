// Package codecs holds the streaming compressors Plumb reads and writes:
// snappy (framing format, the .sz of snzip), xz, gzip and zstd. A codec is
// chosen by name or by file extension; the table is closed, so an unknown
// name is an error rather than a silent pass-through.
package codecs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime"
	"sort"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Codec names a compression format.
type Codec string

// The codecs Plumb knows.
const (
	None   Codec = "none"
	Snappy Codec = "snappy"
	XZ     Codec = "xz"
	Gzip   Codec = "gzip"
	Zstd   Codec = "zstd"
)

var exts = map[Codec]string{None: "", Snappy: ".sz", XZ: ".xz", Gzip: ".gz", Zstd: ".zst"}

// All lists every codec, None first.
func All() []Codec { return []Codec{None, Snappy, XZ, Gzip, Zstd} }

// Parse returns the codec with the given name or extension ("snappy" or
// "sz", "gzip" or "gz", "zstd" or "zst", "xz", and "none", "raw" or "" for
// no compression).
func Parse(name string) (Codec, error) {
	n := strings.TrimPrefix(strings.ToLower(name), ".")
	switch n {
	case "", "none", "raw":
		return None, nil
	case "snappy", "sz":
		return Snappy, nil
	case "xz":
		return XZ, nil
	case "gzip", "gz":
		return Gzip, nil
	case "zstd", "zst":
		return Zstd, nil
	}
	known := make([]string, 0, len(exts))
	for c := range exts {
		known = append(known, string(c))
	}
	sort.Strings(known)
	return "", fmt.Errorf("unsupported codec: %q (known: %s)", name, strings.Join(known, ", "))
}

// FromExt returns the codec a file or queue name's last extension names, or
// None when the extension is not a compression format.
func FromExt(name string) Codec {
	ext := path.Ext(name)
	for c, e := range exts {
		if e != "" && e == ext {
			return c
		}
	}
	return None
}

// magics are the leading bytes of each compressed format.
var magics = []struct {
	magic []byte
	codec Codec
}{
	{[]byte{0x1f, 0x8b}, Gzip},
	{[]byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, XZ},
	{[]byte{0x28, 0xb5, 0x2f, 0xfd}, Zstd},
	{[]byte("\xff\x06\x00\x00sNaPpY"), Snappy},
}

// SniffLen is how many leading bytes Sniff needs to tell every codec.
const SniffLen = 10

// Sniff tells a compressed stream's codec from its first bytes, or None
// when they match no compressed format.
func Sniff(head []byte) Codec {
	for _, m := range magics {
		if bytes.HasPrefix(head, m.magic) {
			return m.codec
		}
	}
	return None
}

// Ext returns the file extension of the codec, with its dot ("" for None).
func (c Codec) Ext() string { return exts[c] }

// CorruptError reports compressed input that cannot be decoded. Offset is
// how many compressed bytes had been consumed when the error was found; the
// fault lies at or before it.
type CorruptError struct {
	Codec  Codec
	Offset int64
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt %s stream at or before compressed byte offset %d: %v", e.Codec, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// NewReader returns a reader of the decompressed bytes of r. Errors in the
// compressed data come back as *CorruptError. Close releases the decoder; it
// does not close r.
func (c Codec) NewReader(r io.Reader) (io.ReadCloser, error) {
	cr := &countingReader{r: r}
	var (
		dec   io.Reader
		close func() error
		err   error
		guard *xzGuard
	)
	switch c {
	case None:
		return io.NopCloser(r), nil
	case Snappy:
		dec = s2.NewReader(cr, s2.ReaderMaxBlockSize(64<<10))
	case XZ:
		guard = newXZGuard(cr, MaxXZDict)
		dec, err = xz.NewReader(guard)
	case Gzip:
		var z *gzip.Reader
		z, err = gzip.NewReader(cr)
		if err == nil {
			dec, close = z, z.Close
		}
	case Zstd:
		var z *zstd.Decoder
		z, err = zstd.NewReader(cr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(MaxZstdWindow))
		if err == nil {
			dec, close = z, func() error { z.Close(); return nil }
		}
	default:
		return nil, fmt.Errorf("unsupported codec: %q", string(c))
	}
	if err != nil {
		if guard != nil && guard.err != nil {
			return nil, guard.err
		}
		return nil, corrupt(c, cr.n, err)
	}
	return &reader{codec: c, dec: dec, cr: cr, guard: guard, close: close}, nil
}

// MaxZstdWindow is the largest zstd window a stream may ask for, as the
// zstd tool's own default (--memory=128MB): the decoder holds a window.
const MaxZstdWindow = 128 << 20

type reader struct {
	codec Codec
	dec   io.Reader
	cr    *countingReader
	guard *xzGuard
	close func() error
	err   error
}

func (r *reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.dec.Read(p)
	if err != nil && err != io.EOF {
		switch {
		case r.cr.err != nil && !errors.Is(r.cr.err, io.EOF) && !errors.Is(r.cr.err, io.ErrUnexpectedEOF):
			// The source failed; that is not corruption.
			err = r.cr.err
		case r.guard != nil && r.guard.err != nil:
			err = r.guard.err
		case errors.Is(err, zstd.ErrWindowSizeExceeded):
			err = fmt.Errorf("%w: the zstd stream asks for a window over %d MiB (recompress without --long, or with a smaller one)", ErrLimit, MaxZstdWindow>>20)
		default:
			err = corrupt(r.codec, r.cr.n, err)
		}
		r.err = err
	}
	return n, err
}

func (r *reader) Close() error {
	if r.close != nil {
		return r.close()
	}
	return nil
}

func corrupt(c Codec, off int64, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return &CorruptError{Codec: c, Offset: off, Err: err}
}

type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// NewWriter returns a writer that compresses into w. Close flushes the
// stream trailer; it does not close w. Even an empty stream gets its header,
// so the output is always a valid file of the format.
func (c Codec) NewWriter(w io.Writer) (io.WriteCloser, error) {
	switch c {
	case None:
		return nopWriteCloser{w}, nil
	case Snappy:
		// Chunks are compressed in parallel; with only a chunk per core in
		// flight, the cores idle while the writer's one output goroutine
		// writes (and the agent checksums) the chunks in order. Six more
		// chunks in flight than cores cut 1 GiB into the agent's spool 17%
		// faster on 2 cores, for 768 KiB more buffers per writer.
		return &snappyWriter{w: w, s: s2.NewWriter(w, s2.WriterSnappyCompat(), s2.WriterConcurrency(runtime.GOMAXPROCS(0)+6))}, nil
	case XZ:
		return xz.NewWriter(w)
	case Gzip:
		return gzip.NewWriterLevel(w, gzip.DefaultCompression)
	case Zstd:
		return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
	}
	return nil, fmt.Errorf("unsupported codec: %q", string(c))
}

// snappyHeader is the stream identifier chunk of the snappy framing format.
var snappyHeader = []byte("\xff\x06\x00\x00sNaPpY")

// snappyWriter makes sure the stream identifier is written even when no
// data is: snzip -d rejects a 0-byte .sz file. It also makes the stream a
// function of the bytes alone, not of how they were written: s2 compresses
// a write larger than its buffer as it comes and ends a chunk wherever the
// write ends, so it is only handed pieces that keep chunks full. The same
// capture cut again then gives byte-identical blocks, which a server
// answers "duplicate" rather than refusing as a conflict.
type snappyWriter struct {
	w       io.Writer
	s       *s2.Writer
	written bool
	n       int64 // bytes written
}

// snappyChunk is s2's chunk size in snappy mode (WriterSnappyCompat).
const snappyChunk = 64<<10 - 8

func (s *snappyWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		s.written = true
	}
	total := 0
	for len(p) > 0 {
		k := len(p)
		if fill := int(s.n % snappyChunk); fill > 0 {
			k = min(k, snappyChunk-fill) // complete the chunk being filled
		} else if k > snappyChunk {
			k -= k % snappyChunk // whole chunks, compressed without a copy
		}
		n, err := s.s.Write(p[:k])
		total += n
		s.n += int64(n)
		if err != nil {
			return total, err
		}
		p = p[k:]
	}
	return total, nil
}

func (s *snappyWriter) Close() error {
	if err := s.s.Close(); err != nil {
		return err
	}
	if !s.written {
		_, err := s.w.Write(snappyHeader)
		return err
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
