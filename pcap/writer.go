package pcap

import (
	"bufio"
	"io"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Writer writes a pcap file (pcapng input is written as pcap: it has one
// link type, so nothing is lost but pcapng's comments and statistics).
type Writer struct {
	bw *bufio.Writer
	pw *pcapgo.Writer
	// Bytes counts what has been written, header included.
	Bytes int64
}

// HeaderSize is the size of a pcap file header; RecordHeaderSize that of
// each packet record's header.
const (
	HeaderSize       = 24
	RecordHeaderSize = 16
)

// NewWriter writes the pcap file header to w. Nanos chooses nanosecond
// timestamps, so a nanosecond capture keeps its precision.
func NewWriter(w io.Writer, linkType layers.LinkType, snaplen uint32, nanos bool) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	pw := pcapgo.NewWriter(bw)
	if nanos {
		pw = pcapgo.NewWriterNanos(bw)
	}
	if err := pw.WriteFileHeader(snaplen, linkType); err != nil {
		return nil, err
	}
	return &Writer{bw: bw, pw: pw, Bytes: HeaderSize}, nil
}

// WritePacket writes one record.
func (w *Writer) WritePacket(ci gopacket.CaptureInfo, data []byte) error {
	ci.CaptureLength = len(data)
	if ci.Length < ci.CaptureLength {
		ci.Length = ci.CaptureLength
	}
	if err := w.pw.WritePacket(ci, data); err != nil {
		return err
	}
	w.Bytes += RecordHeaderSize + int64(len(data))
	return nil
}

// Flush writes out what is buffered.
func (w *Writer) Flush() error { return w.bw.Flush() }

// WriteEmptyLike writes to w a capture with no packet of the same link
// type, snap length and timestamp resolution as the capture r holds (pcap
// or pcapng, compressed or not; only its header is read): the block that
// ends a capture, made by whoever ends it. It returns ErrNotCapture when r
// holds no capture.
func WriteEmptyLike(w io.Writer, r io.Reader) error {
	rd, closer, err := NewReader(r)
	if err != nil {
		return err
	}
	defer closer.Close()
	pw, err := NewWriter(w, rd.LinkType, rd.Snaplen, rd.Nanos)
	if err != nil {
		return err
	}
	return pw.Flush()
}
