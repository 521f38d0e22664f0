// Package hostile makes the inputs an attacker would send: captures,
// compressed streams and blocks built to take memory or disk. Tests of
// every layer that reads outside bytes use them, so one reproduction
// serves the parser, the stage and the server.
package hostile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// zeros writes n zero bytes to w.
func zeros(w io.Writer, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// BigRecordPcap is a pcap whose header claims a snap length of
// 0xFFFFFFFF and whose one record holds size bytes (it really does: a
// reader that trusts the length allocates them all), compressed with
// zstd so it is small: 2 GiB is a 66 KB file.
func BigRecordPcap(size uint32) []byte {
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 0xFFFFFFFF)
	binary.LittleEndian.PutUint32(hdr[20:], 1) // Ethernet
	zw.Write(hdr)
	rec := make([]byte, 16)
	binary.LittleEndian.PutUint32(rec[0:], 1746457865) // 2025-05-05
	binary.LittleEndian.PutUint32(rec[8:], size)
	binary.LittleEndian.PutUint32(rec[12:], size)
	zw.Write(rec)
	zeros(zw, int64(size))
	zw.Close()
	return out.Bytes()
}

// ZstdBomb is size zero bytes compressed with zstd.
func ZstdBomb(size int64) []byte {
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	zeros(zw, size)
	zw.Close()
	return out.Bytes()
}

// GzipBomb is size zero bytes compressed with gzip.
func GzipBomb(size int64) []byte {
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	zeros(zw, size)
	zw.Close()
	return out.Bytes()
}

// XZBigDict compresses data with xz, then patches the block header's
// LZMA2 dictionary size to 4 GiB and fixes the header's CRC: a valid
// stream whose decoder must allocate the dictionary before the first
// byte comes out.
func XZBigDict(data []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := xz.NewWriter(&out)
	if err != nil {
		return nil, err
	}
	zw.Write(data)
	zw.Close()
	b := out.Bytes()
	const blk = 12 // after the stream header
	size := (int(b[blk]) + 1) * 4
	h := b[blk : blk+size]
	flags := h[1]
	i := 2
	skipVarint := func() {
		for h[i]&0x80 != 0 {
			i++
		}
		i++
	}
	if flags&0x40 != 0 {
		skipVarint()
	}
	if flags&0x80 != 0 {
		skipVarint()
	}
	if h[i] != 0x21 || h[i+1] != 1 {
		return nil, errors.New("hostile: the xz block's first filter is not LZMA2")
	}
	h[i+2] = 40 // 4 GiB - 1
	binary.LittleEndian.PutUint32(h[size-4:], crc32.ChecksumIEEE(h[:size-4]))
	return b, nil
}

// BigRecordPcapNG is BigRecordPcap as pcapng: an enhanced packet block
// of size bytes, zstd-compressed.
func BigRecordPcapNG(size uint32) []byte {
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	le := binary.LittleEndian
	shb := make([]byte, 28)
	le.PutUint32(shb[0:], 0x0A0D0D0A)
	le.PutUint32(shb[4:], 28)
	le.PutUint32(shb[8:], 0x1A2B3C4D)
	le.PutUint16(shb[12:], 1)
	le.PutUint64(shb[16:], ^uint64(0))
	le.PutUint32(shb[24:], 28)
	idb := make([]byte, 20)
	le.PutUint32(idb[0:], 1)
	le.PutUint32(idb[4:], 20)
	le.PutUint16(idb[8:], 1) // Ethernet
	le.PutUint32(idb[16:], 20)
	pad := (4 - size%4) % 4
	epb := make([]byte, 28)
	le.PutUint32(epb[0:], 6)
	le.PutUint32(epb[4:], 32+size+pad)
	le.PutUint32(epb[20:], size)
	le.PutUint32(epb[24:], size)
	zw.Write(shb)
	zw.Write(idb)
	zw.Write(epb)
	zeros(zw, int64(size+pad))
	tail := make([]byte, 4)
	le.PutUint32(tail, 32+size+pad)
	zw.Write(tail)
	zw.Close()
	return out.Bytes()
}

// ArrowZstdBomb is an Arrow IPC file with one int64 column, ZSTD
// compressed, whose buffer claims to decompress to claim bytes: a
// reader that trusts the claim allocates it before decompressing.
func ArrowZstdBomb(claim int64) ([]byte, error) {
	return arrowBomb(claim, ipc.WithZstd(), []byte{0x28, 0xb5, 0x2f, 0xfd})
}

// ArrowLZ4Bomb is ArrowZstdBomb with the column LZ4 compressed (the
// codec of the DNS records' files).
func ArrowLZ4Bomb(claim int64) ([]byte, error) {
	return arrowBomb(claim, ipc.WithLZ4(), []byte{0x04, 0x22, 0x4d, 0x18})
}

// arrowBomb writes the file with codec and sets the uncompressed length
// before the buffer's frame, which starts with magic.
func arrowBomb(claim int64, codec ipc.Option, magic []byte) ([]byte, error) {
	const rows = 1 << 17
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues(make([]int64, rows), nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, rows)
	var out bytes.Buffer
	w, err := ipc.NewFileWriter(&out, ipc.WithSchema(schema), codec)
	if err != nil {
		return nil, err
	}
	if err := w.Write(rec); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	data := out.Bytes()
	want := append(binary.LittleEndian.AppendUint64(nil, rows*8), magic...)
	i := bytes.Index(data, want)
	if i < 0 {
		return nil, errors.New("hostile: no uncompressed length in the Arrow file")
	}
	binary.LittleEndian.PutUint64(data[i:], uint64(claim))
	return data, nil
}

// HalfOpenStreams is a pcap (Ethernet, microsecond times) of streams
// TCP connections to port 53 that never finish a message: each sends
// inOrder bytes of a message announced as 65,535 bytes long, then
// skips 1,000 bytes and sends held more beyond that hole, in 1,400-byte
// segments. Every second stream begins with a SYN (a reader follows it
// from there); the others begin mid-stream. Anyone who can open TCP
// connections to a captured resolver can send this: a reader that keeps
// what every stream holds spends streams × (inOrder + held) bytes, and
// more wherever it copies that state.
func HalfOpenStreams(streams, inOrder, held int) []byte {
	var b bytes.Buffer
	WriteHalfOpenStreams(&b, streams, inOrder, held)
	return b.Bytes()
}

// HalfOpenStreamsZstd is HalfOpenStreams compressed with zstd, written
// as it is made: 1,024 streams of 64,000 + 256,000 bytes are a 327 MB
// capture in a block of a few MB (56 KB, with timestamps and sequence
// numbers chosen to repeat).
func HalfOpenStreamsZstd(streams, inOrder, held int) []byte {
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	bw := bufio.NewWriterSize(zw, 1<<20)
	WriteHalfOpenStreams(bw, streams, inOrder, held)
	bw.Flush()
	zw.Close()
	return out.Bytes()
}

// WriteHalfOpenStreams writes HalfOpenStreams to w.
func WriteHalfOpenStreams(b io.Writer, streams, inOrder, held int) {
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 1) // Ethernet
	b.Write(hdr)
	ts := uint32(1746457865)
	usec := uint32(0)
	frame := func(src uint16, seq uint32, flags byte, payload []byte) {
		f := make([]byte, 54, 54+len(payload))
		copy(f[0:], []byte{0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00})
		ip := f[14:34]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(40+len(payload)))
		ip[8], ip[9] = 64, 6
		copy(ip[12:], []byte{192, 0, 2, byte(src >> 8)})
		ip[15] = byte(src)
		copy(ip[16:], []byte{198, 51, 100, 53})
		tcp := f[34:54]
		binary.BigEndian.PutUint16(tcp[0:], 10000+src)
		binary.BigEndian.PutUint16(tcp[2:], 53)
		binary.BigEndian.PutUint32(tcp[4:], seq)
		tcp[12] = 5 << 4
		tcp[13] = flags
		f = append(f, payload...)
		rec := make([]byte, 16)
		usec += 10
		binary.LittleEndian.PutUint32(rec[0:], ts+usec/1000000)
		binary.LittleEndian.PutUint32(rec[4:], usec%1000000)
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		b.Write(rec)
		b.Write(f)
	}
	const seg = 1400
	data := make([]byte, seg)
	for s := range streams {
		src := uint16(s)
		seq := uint32(1000)
		if s%2 == 0 {
			frame(src, seq-1, 0x02, nil) // SYN
		}
		msg := append([]byte{0xff, 0xff}, data[:seg-2]...) // a 65,535-byte message begins
		frame(src, seq, 0x18, msg)
		seq += uint32(len(msg))
		for sent := len(msg); sent < inOrder; sent += seg {
			frame(src, seq, 0x18, data[:min(seg, inOrder-sent)])
			seq += uint32(min(seg, inOrder-sent))
		}
		seq += 1000 // the hole
		for sent := 0; sent < held; sent += seg {
			frame(src, seq, 0x18, data[:min(seg, held-sent)])
			seq += uint32(min(seg, held-sent))
		}
	}
}
