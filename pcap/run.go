package pcap

import (
	"encoding/binary"
	"time"
)

// RunLimit bounds the records NextRun returns.
type RunLimit struct {
	// Bytes bounds the run's size, record headers included.
	Bytes int64
	// Before, when set, ends the run before the first record stamped at
	// or after it.
	Before time.Time
}

// Raw reports whether NextRun can hand out this capture's records as they
// are: it is little-endian pcap, byte for byte what Writer writes.
func (r *Reader) Raw() bool { return r.br != nil }

// NextRun returns consecutive records exactly as they are in the capture,
// record headers included, as many as are already buffered and fit lim:
// copying them whole to a Writer of the same resolution gives the bytes
// Next and WritePacket would, without the work per packet. The run is
// valid until the next call of NextRun or Next.
//
// It returns no records, and no error, when the next record is outside
// lim, is not wholly buffered yet, or is one it leaves to Next (a header
// Next would refuse or normalise, or the end of the capture): the caller
// then reads one packet with Next, which decides. Only a Raw reader
// returns records.
func (r *Reader) NextRun(lim RunLimit) (run []byte, packets int) {
	if r.br == nil || r.err != nil {
		return nil, 0
	}
	buf, _ := r.br.Peek(r.br.Buffered())
	var beforeSec int64
	var beforeNsec int64
	if !lim.Before.IsZero() {
		beforeSec, beforeNsec = lim.Before.Unix(), int64(lim.Before.Nanosecond())
	}
	off := 0
	for off+RecordHeaderSize <= len(buf) {
		h, ok := r.header(buf[off:])
		if !ok {
			break
		}
		size := RecordHeaderSize + h.incl
		if off+size > len(buf) || int64(off+size) > lim.Bytes {
			break
		}
		if !lim.Before.IsZero() && (h.sec > beforeSec || h.sec == beforeSec && h.nsec >= beforeNsec) {
			break
		}
		off += size
		packets++
	}
	if packets == 0 {
		return nil, 0
	}
	run = buf[:off]
	r.br.Discard(off)
	r.packets += int64(packets)
	return run, packets
}

// recordHeader is a little-endian pcap record's header.
type recordHeader struct {
	sec, nsec  int64
	incl, orig int
}

// header reads the record header at the start of b (at least
// RecordHeaderSize bytes). ok is false for a record Next would refuse or
// normalise (longer than MaxRecord, captured beyond its length, its
// sub-second field a second or more): those are left to pcapgo.
func (r *Reader) header(b []byte) (h recordHeader, ok bool) {
	sec, frac := binary.LittleEndian.Uint32(b[0:4]), binary.LittleEndian.Uint32(b[4:8])
	incl, orig := binary.LittleEndian.Uint32(b[8:12]), binary.LittleEndian.Uint32(b[12:16])
	fracMax, scale := uint32(1e6), int64(1000)
	if r.Nanos {
		fracMax, scale = 1e9, 1
	}
	if incl > MaxRecord || incl > orig || frac >= fracMax {
		return h, false
	}
	return recordHeader{sec: int64(sec), nsec: int64(frac) * scale, incl: int(incl), orig: int(orig)}, true
}

// eagerReadMax is the largest record pcapgo reads whatever the snap length
// says (its own constant); NextRun refuses no record Next would read.
const eagerReadMax = 262144

// WriteRun writes records as NextRun returns them, from a reader of this
// writer's timestamp resolution.
func (w *Writer) WriteRun(run []byte) error {
	n, err := w.bw.Write(run)
	w.Bytes += int64(n)
	return err
}
