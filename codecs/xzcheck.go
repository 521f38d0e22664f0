package codecs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxXZDict is the largest LZMA2 dictionary an xz stream may ask for:
// the decoder allocates it up front, so a 458 KB block claiming 4 GiB
// took 3.4 GB. xz -9 uses 64 MiB; nothing Plumb or xz's presets write
// comes near this.
const MaxXZDict = 128 << 20

// ErrLimit marks input refused because it asks for more than a limit
// allows (a dictionary, a window, an expanded size).
var ErrLimit = errors.New("over a limit")

// xzGuard passes an xz stream through unchanged while following its
// structure (stream header, block headers, LZMA2 chunk headers, index,
// footer), which needs no decoding, so it can refuse a block header whose
// dictionary is over the limit before the decoder sees it. ulikunitz/xz
// has no such limit: its DictCap is a minimum. Input that does not
// follow the structure is passed on for the decoder to reject.
type xzGuard struct {
	r       io.Reader
	maxDict int64
	err     error

	st      xzState
	need    int    // bytes wanted in buf (header states)
	buf     []byte // a header being collected
	skip    int64  // bytes to pass over (chunk data, padding, check)
	check   int    // size of the stream's check field
	blkLen  int64  // compressed bytes of the current block so far
	records uint64 // index records left
	counted bool   // the index's record count was read
	varints int    // varints left in the current index record
	acc     uint64 // the varint being read
	shift   uint
	idxLen  int64 // bytes of the index so far
}

type xzState int

const (
	xzStreamHeader xzState = iota
	xzBlockStart           // a block header's size byte, or the index indicator
	xzBlockHeader
	xzChunk     // an LZMA2 chunk's control byte
	xzChunkHead // the rest of a chunk header
	xzSkipData  // chunk data
	xzPadCheck  // block padding and check
	xzIndexVarint
	xzIndexTail // index padding and CRC
	xzFooter
	xzStreamPad // zero padding, or another stream
	xzDone      // structure lost: the decoder decides
)

func newXZGuard(r io.Reader, maxDict int64) *xzGuard {
	return &xzGuard{r: r, maxDict: maxDict, need: 12}
}

func (g *xzGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	for i := 0; i < n; {
		adv, ferr := g.feed(p[i:n])
		if ferr != nil {
			g.err = ferr
			return 0, ferr
		}
		i += adv
	}
	return n, err
}

// feed consumes a prefix of b and returns its length.
func (g *xzGuard) feed(b []byte) (int, error) {
	switch g.st {
	case xzDone:
		return len(b), nil
	case xzSkipData, xzPadCheck:
		k := int(min(int64(len(b)), g.skip))
		g.skip -= int64(k)
		if g.st == xzSkipData {
			g.blkLen += int64(k)
		}
		if g.skip == 0 {
			if g.st == xzSkipData {
				g.st = xzChunk
			} else {
				g.st = xzBlockStart
			}
		}
		return k, nil
	case xzIndexVarint:
		c := b[0]
		g.idxLen++
		g.acc |= uint64(c&0x7f) << g.shift
		g.shift += 7
		if c&0x80 != 0 {
			if g.shift > 63 {
				g.st = xzDone
			}
			return 1, nil
		}
		v := g.acc
		g.acc, g.shift = 0, 0
		switch {
		case !g.counted: // the number of records
			g.counted, g.records, g.varints = true, v, 2
		default: // a record's unpadded or uncompressed size
			g.varints--
			if g.varints == 0 {
				g.records--
				g.varints = 2
			}
		}
		if g.records == 0 {
			g.st = xzIndexTail
			g.need = int((4-g.idxLen%4)%4) + 4
			g.buf = g.buf[:0]
		}
		return 1, nil
	case xzStreamPad:
		if b[0] == 0 {
			return 1, nil
		}
		g.st, g.need, g.buf = xzStreamHeader, 12, g.buf[:0]
		return 0, nil
	case xzChunk:
		c := b[0]
		g.blkLen++
		switch {
		case c == 0x00:
			g.st, g.skip = xzPadCheck, int64((4-g.blkLen%4)%4)+int64(g.check)
			if g.skip == 0 {
				g.st = xzBlockStart
			}
		case c == 0x01 || c == 0x02:
			g.st, g.need, g.buf = xzChunkHead, 3, append(g.buf[:0], c)
		case c >= 0x80:
			g.need = 5
			if c >= 0xc0 {
				g.need = 6
			}
			g.st, g.buf = xzChunkHead, append(g.buf[:0], c)
		default:
			g.st = xzDone
		}
		return 1, nil
	case xzBlockStart:
		if b[0] == 0x00 { // the index
			g.st, g.idxLen, g.counted, g.acc, g.shift = xzIndexVarint, 1, false, 0, 0
			return 1, nil
		}
		g.st, g.need, g.buf = xzBlockHeader, (int(b[0])+1)*4, g.buf[:0]
	}
	// Header states: collect need bytes.
	k := min(len(b), g.need-len(g.buf))
	g.buf = append(g.buf, b[:k]...)
	if len(g.buf) < g.need {
		return k, nil
	}
	return k, g.header()
}

// header acts on a complete header in buf.
func (g *xzGuard) header() error {
	h := g.buf
	switch g.st {
	case xzStreamHeader:
		if !bytes.Equal(h[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}) {
			g.st = xzDone
			return nil
		}
		g.check = checkSize(h[7] & 0x0f)
		g.st = xzBlockStart
	case xzBlockHeader:
		dict, ok := lzma2Dict(h)
		if !ok {
			g.st = xzDone
			return nil
		}
		if dict > g.maxDict {
			return fmt.Errorf("%w: the xz block asks for a %d MiB LZMA2 dictionary; the most allowed is %d MiB (recompress with a smaller preset, e.g. xz -9)",
				ErrLimit, dict>>20, g.maxDict>>20)
		}
		g.st, g.blkLen = xzChunk, 0
	case xzChunkHead:
		if h[0] == 0x01 || h[0] == 0x02 {
			g.skip = int64(h[1])<<8 | int64(h[2]) + 1
		} else {
			g.skip = int64(h[3])<<8 | int64(h[4]) + 1
		}
		g.blkLen += int64(len(h) - 1)
		g.st = xzSkipData
	case xzIndexTail:
		g.st, g.need, g.buf = xzFooter, 12, g.buf[:0]
	case xzFooter:
		g.st = xzStreamPad
	}
	return nil
}

func checkSize(t byte) int {
	switch {
	case t == 0:
		return 0
	case t <= 3:
		return 4
	case t <= 6:
		return 8
	case t <= 9:
		return 16
	case t <= 12:
		return 32
	}
	return 64
}

// lzma2Dict finds the LZMA2 filter's dictionary size in a block header.
func lzma2Dict(h []byte) (int64, bool) {
	if len(h) < 8 {
		return 0, false
	}
	flags := h[1]
	filters := int(flags&3) + 1
	b := h[2 : len(h)-4]
	varint := func() (uint64, bool) {
		var v uint64
		for i := 0; i < 9 && i < len(b); i++ {
			v |= uint64(b[i]&0x7f) << (7 * i)
			if b[i]&0x80 == 0 {
				b = b[i+1:]
				return v, true
			}
		}
		return 0, false
	}
	if flags&0x40 != 0 {
		if _, ok := varint(); !ok {
			return 0, false
		}
	}
	if flags&0x80 != 0 {
		if _, ok := varint(); !ok {
			return 0, false
		}
	}
	for range filters {
		id, ok1 := varint()
		size, ok2 := varint()
		if !ok1 || !ok2 || uint64(len(b)) < size {
			return 0, false
		}
		props := b[:size]
		b = b[size:]
		if id == 0x21 && size == 1 {
			c := props[0]
			if c > 40 {
				return 0, false
			}
			if c == 40 {
				return 1<<32 - 1, true
			}
			return int64(2|c&1) << (c/2 + 11), true
		}
	}
	return 0, false
}
