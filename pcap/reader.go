// Package pcap reads and writes capture files: pcap (microsecond and
// nanosecond) and pcapng, plain or compressed with any codec Plumb knows.
// It knows nothing of the server; the agent and the stages build on it.
package pcap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/plumb-dev/plumb/codecs"
)

// ErrTruncated marks a capture whose last record is cut short, as when a
// capture process is killed mid-write. The packets before it are good.
var ErrTruncated = errors.New("capture ends inside a packet record")

// ErrRecordTooLarge marks a packet record longer than MaxRecord: a
// malformed capture, not something to allocate.
var ErrRecordTooLarge = errors.New("packet record larger than the most a capture may hold")

// MaxRecord is the longest packet record Reader takes, libpcap's
// MAXIMUM_SNAPLEN: tcpdump and Wireshark refuse longer ones too, and a
// longer one in a file is an attack or damage.
const MaxRecord = 262144

// ErrNotCapture marks input that is neither pcap nor pcapng.
var ErrNotCapture = errors.New("not a pcap or pcapng capture")

// Format is the container format of a capture.
type Format string

// The formats Reader reads.
const (
	FormatPcap   Format = "pcap"
	FormatPcapNG Format = "pcapng"
)

// Reader reads the packets of one capture stream.
type Reader struct {
	// LinkType and Snaplen come from the capture's header (for pcapng, its
	// first interface; all interfaces must share the link type).
	LinkType layers.LinkType
	Snaplen  uint32
	// Nanos is true when timestamps have nanosecond resolution.
	Nanos  bool
	Format Format

	read    func() ([]byte, gopacket.CaptureInfo, error)
	packets int64
	err     error
	lim     *recordLimit // bounds what one read may take from the input

	// br is set when the records can be handed out as they are in the
	// file (little-endian pcap, what Writer writes); see NextRun.
	br *bufio.Reader
}

var magics = []struct {
	magic  []byte
	format Format
	nanos  bool
}{
	{[]byte{0xa1, 0xb2, 0xc3, 0xd4}, FormatPcap, false},
	{[]byte{0xd4, 0xc3, 0xb2, 0xa1}, FormatPcap, false},
	{[]byte{0xa1, 0xb2, 0x3c, 0x4d}, FormatPcap, true},
	{[]byte{0x4d, 0x3c, 0xb2, 0xa1}, FormatPcap, true},
	{[]byte{0x0a, 0x0d, 0x0d, 0x0a}, FormatPcapNG, true},
}

// IsCapture reports whether head, a file's first bytes, starts an
// uncompressed pcap or pcapng capture.
func IsCapture(head []byte) bool {
	for _, m := range magics {
		if bytes.HasPrefix(head, m.magic) {
			return true
		}
	}
	return false
}

// NewReader reads a capture from r, which may be compressed with gzip, xz,
// zstd or snappy: the format and the compression are told from the first
// bytes, never from a file name. Close the returned closer when done (it
// releases a decompressor; it does not close r).
func NewReader(r io.Reader) (*Reader, io.Closer, error) {
	lim := &recordLimit{r: r}
	br := bufio.NewReaderSize(lim, readBuffer)
	head, err := br.Peek(codecs.SniffLen)
	if len(head) == 0 {
		if err == nil || err == io.EOF {
			return nil, nil, fmt.Errorf("%w: the input is empty", ErrNotCapture)
		}
		return nil, nil, err
	}
	if c := codecs.Sniff(head); c != codecs.None {
		dec, err := c.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		rd, _, err := NewReader(dec)
		if err != nil {
			dec.Close()
			return nil, nil, fmt.Errorf("%s-compressed input: %w", c, err)
		}
		return rd, dec, nil
	}
	rd, err := newRawReader(br, head)
	if rd != nil {
		rd.lim = lim
	}
	return rd, io.NopCloser(nil), err
}

const readBuffer = 1 << 20

// recordLimit fails a read of the capture that would take more of the
// input than one record can span, so a record claiming gigabytes (and
// really holding them: a decompression bomb) is refused after MaxRecord
// bytes, not allocated. pcapgo checks a pcap record's length against the
// snap length, but a header may say 4 GiB, and pcapng has no check.
type recordLimit struct {
	r       io.Reader
	armed   bool
	n, most int64
	tripped bool
}

func (l *recordLimit) Read(p []byte) (int, error) {
	if l.armed && l.n >= l.most {
		l.tripped = true
		return 0, ErrRecordTooLarge
	}
	if l.armed && int64(len(p)) > l.most-l.n {
		p = p[:l.most-l.n]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	return n, err
}

// arm starts the count of one read: a record, its block's options and
// the read-ahead of the buffer in front of it.
func (l *recordLimit) arm() { l.armed, l.n, l.most = true, 0, MaxRecord+2*readBuffer+64<<10 }

func (l *recordLimit) disarm() { l.armed = false }

func newRawReader(br *bufio.Reader, head []byte) (*Reader, error) {
	for _, m := range magics {
		if !bytes.HasPrefix(head, m.magic) {
			continue
		}
		rd := &Reader{Format: m.format, Nanos: m.nanos}
		if m.format == FormatPcap {
			pr, err := pcapgo.NewReader(br)
			if err != nil {
				return nil, fmt.Errorf("%w: pcap header: %v", ErrNotCapture, err)
			}
			rd.LinkType, rd.Snaplen, rd.read = pr.LinkType(), pr.Snaplen(), pr.ZeroCopyReadPacketData
			if rd.Snaplen > MaxRecord {
				// pcapgo takes records up to the header's snap length,
				// which may say 4 GiB; above MaxRecord it refuses them.
				pr.SetSnaplen(MaxRecord)
			}
			// NextRun reads br beside pcapgo, which reads the very same
			// buffer: its bufio.NewReader(br) returns br itself, br being
			// larger than bufio's default size. So runs and packets can
			// interleave (TestRunsCutLikePackets, FuzzReader check it).
			if head[0] == 0xd4 || head[0] == 0x4d { // little-endian magic
				rd.br = br
			}
			return rd, nil
		}
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{ErrorOnMismatchingLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			if errors.Is(err, pcapgo.ErrNgLinkTypeMismatch) {
				return nil, errMixedLinkTypes(err)
			}
			return nil, fmt.Errorf("%w: pcapng header: %v", ErrNotCapture, err)
		}
		rd.LinkType, rd.read = nr.LinkType(), nr.ZeroCopyReadPacketData
		if ifc, err := nr.Interface(0); err == nil {
			rd.Snaplen = ifc.SnapLength
		}
		if rd.Snaplen == 0 {
			rd.Snaplen = 262144
		}
		return rd, nil
	}
	n := min(len(head), 4)
	return nil, fmt.Errorf("%w: it starts with %x, not a pcap or pcapng magic number", ErrNotCapture, head[:n])
}

// Next returns the next packet. The data is valid until the next call. At
// the end it returns io.EOF; a last record cut short gives an error
// wrapping ErrTruncated (and io.ErrUnexpectedEOF); a record that cannot be
// a packet (say, a length beyond any snap length) gives an error naming the
// packet. The reader stops at the first error.
func (r *Reader) Next() ([]byte, gopacket.CaptureInfo, error) {
	if r.err != nil {
		return nil, gopacket.CaptureInfo{}, r.err
	}
	if data, ci, ok := r.peek(); ok {
		r.packets++
		return data, ci, nil
	}
	if r.lim != nil {
		r.lim.arm()
	}
	data, ci, err := r.read()
	if r.lim != nil {
		r.lim.disarm()
		if r.lim.tripped || err == nil && len(data) > MaxRecord {
			err = fmt.Errorf("%w (%d bytes)", ErrRecordTooLarge, MaxRecord)
		}
	}
	if err != nil && strings.HasPrefix(err.Error(), "capture length exceeds snap length") {
		err = fmt.Errorf("%w (%d bytes): %v", ErrRecordTooLarge, MaxRecord, err)
	}
	switch {
	case err == nil:
		r.packets++
		return data, ci, nil
	case err == io.EOF:
		r.err = io.EOF
	case errors.Is(err, pcapgo.ErrNgLinkTypeMismatch):
		r.err = fmt.Errorf("packet %d: %w", r.packets+1, errMixedLinkTypes(err))
	case errors.Is(err, io.ErrUnexpectedEOF):
		r.err = fmt.Errorf("%w after packet %d: %w", ErrTruncated, r.packets, io.ErrUnexpectedEOF)
	default:
		r.err = fmt.Errorf("packet %d: %w", r.packets+1, err)
	}
	return nil, ci, r.err
}

// peek reads the next record of a little-endian pcap straight from the
// read buffer, without pcapgo's copy into its own (most of the cost of
// reading a small packet). It takes only a record pcapgo would return as
// it is (header, which NextRun uses too); anything else (an error to
// report, the end) is left to pcapgo.
func (r *Reader) peek() ([]byte, gopacket.CaptureInfo, bool) {
	if r.br == nil {
		return nil, gopacket.CaptureInfo{}, false
	}
	b, err := r.br.Peek(RecordHeaderSize)
	if err != nil {
		return nil, gopacket.CaptureInfo{}, false
	}
	h, ok := r.header(b)
	if !ok {
		return nil, gopacket.CaptureInfo{}, false
	}
	rec, err := r.br.Peek(RecordHeaderSize + h.incl)
	if err != nil {
		return nil, gopacket.CaptureInfo{}, false
	}
	r.br.Discard(len(rec))
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(h.sec, h.nsec).UTC(), CaptureLength: h.incl, Length: h.orig}
	return rec[RecordHeaderSize:], ci, true
}

func errMixedLinkTypes(err error) error {
	return fmt.Errorf("pcapng with interfaces of different link types; split it per link type first (e.g. with editcap): %w", err)
}

// Packets returns how many packets were read.
func (r *Reader) Packets() int64 { return r.packets }
