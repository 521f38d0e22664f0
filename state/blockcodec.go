package state

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"
)

// A block's metadata is the bulk of the metadata file: one record per
// block for ever, where everything else grows with what is open. As JSON
// a record of a tiny block took about 450 bytes, a third of them field
// names and a third the blob key, which repeats the name and checksum.
// Records are now written in a compact binary form (about 110 bytes);
// those written as JSON by older servers are still read as they are, and
// rewritten in the new form when next changed.
//
// The form, after its version byte:
//
//	flags byte
//	uvarint seq, uvarint serial, varint size, varint kernel_dropped
//	time, arrived: varint unix seconds, uvarint nanoseconds (absent when zero)
//	sha256: 32 bytes (absent when it is not 64 lower-case hex digits)
//	strings, each uvarint length and bytes: name, queue, instance,
//	then key unless it is the usual one, then sha256 unless raw
const blockRecordV1 = 0x01

const (
	flagKeyUsual    = 1 << iota // key is queue/instance/name.sha256-SUM
	flagTimeZero                // Time is the zero time
	flagArrivedZero             // Arrived is the zero time
	flagSumText                 // SHA256 is kept as text, not 32 bytes
	flagFinal                   // Final is set
	flagEnded                   // Ended is set
)

var errBlockRecord = errors.New("block record is cut short or malformed")

// usualKey is the blob key blob.BlockKey gives a block outside a lake.
func usualKey(b Block) string {
	return b.Queue + "/" + b.Instance + "/" + b.Name + ".sha256-" + b.SHA256
}

// encodeBlock returns b's record in the compact form.
func encodeBlock(b Block) []byte {
	var flags byte
	sum, err := hex.DecodeString(b.SHA256)
	if err != nil || len(sum) != 32 || hex.EncodeToString(sum) != b.SHA256 {
		flags |= flagSumText
		sum = nil
	}
	if b.Key == usualKey(b) {
		flags |= flagKeyUsual
	}
	if b.Time.IsZero() {
		flags |= flagTimeZero
	}
	if b.Arrived.IsZero() {
		flags |= flagArrivedZero
	}
	if b.Final {
		flags |= flagFinal
	}
	if b.Ended {
		flags |= flagEnded
	}
	out := make([]byte, 0, 64+len(b.Name)+len(b.Queue)+len(b.Instance))
	out = append(out, blockRecordV1, flags)
	out = binary.AppendUvarint(out, b.Seq)
	out = binary.AppendUvarint(out, b.Serial)
	out = binary.AppendVarint(out, b.Size)
	out = binary.AppendVarint(out, b.KernelDropped)
	for _, t := range []time.Time{b.Time, b.Arrived} {
		if !t.IsZero() {
			out = binary.AppendVarint(out, t.Unix())
			out = binary.AppendUvarint(out, uint64(t.Nanosecond()))
		}
	}
	out = append(out, sum...)
	strs := []string{b.Name, b.Queue, b.Instance}
	if flags&flagKeyUsual == 0 {
		strs = append(strs, b.Key)
	}
	if flags&flagSumText != 0 {
		strs = append(strs, b.SHA256)
	}
	for _, s := range strs {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	return out
}

// decodeBlock reads a record in either form into b.
func decodeBlock(raw []byte, b *Block) error {
	if len(raw) == 0 || raw[0] != blockRecordV1 {
		return json.Unmarshal(raw, b)
	}
	d := recordReader{buf: raw[1:]}
	flags := d.byte()
	*b = Block{Seq: d.uvarint(), Serial: d.uvarint(), Size: d.varint(), KernelDropped: d.varint(), Final: flags&flagFinal != 0, Ended: flags&flagEnded != 0}
	if flags&flagTimeZero == 0 {
		b.Time = d.time()
	}
	if flags&flagArrivedZero == 0 {
		b.Arrived = d.time()
	}
	if flags&flagSumText == 0 {
		b.SHA256 = hex.EncodeToString(d.bytes(32))
	}
	b.Name, b.Queue, b.Instance = d.string(), d.string(), d.string()
	if flags&flagKeyUsual == 0 {
		b.Key = d.string()
	}
	if flags&flagSumText != 0 {
		b.SHA256 = d.string()
	}
	if d.bad || len(d.buf) != 0 {
		return errBlockRecord
	}
	if flags&flagKeyUsual != 0 {
		b.Key = usualKey(*b)
	}
	return nil
}

// recordReader reads a compact record; a read past its end or a bad
// varint sets bad, and every later read returns zero.
type recordReader struct {
	buf []byte
	bad bool
}

func (r *recordReader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.buf) {
		r.bad = true
		return nil
	}
	out := r.buf[:n]
	r.buf = r.buf[n:]
	return out
}

func (r *recordReader) byte() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *recordReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

// varint reads what binary.AppendVarint wrote: a uvarint, zig-zagged.
func (r *recordReader) varint() int64 {
	ux := r.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (r *recordReader) time() time.Time {
	sec, nsec := r.varint(), r.uvarint()
	if nsec >= 1e9 {
		r.bad = true
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (r *recordReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.buf)) {
		r.bad = true
		return ""
	}
	return string(r.bytes(int(n)))
}
