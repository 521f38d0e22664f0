package benchkit

import (
	"bufio"
	"errors"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket"

	"github.com/plumb-dev/plumb/pcap"
)

// Replicate writes the capture src again and again to dst until dst
// holds at least size bytes, each copy later than the one before by the
// capture's span and a second: a small real capture becomes a large one
// with the same traffic, for measuring what real traffic costs.
func Replicate(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	r, closer, err := pcap.NewReader(in)
	if err != nil {
		return err
	}
	defer closer.Close()
	var cis []gopacket.CaptureInfo
	var frames [][]byte
	var bytes int64
	for {
		data, ci, err := r.Next()
		if err == io.EOF || errors.Is(err, pcap.ErrTruncated) {
			break
		}
		if err != nil {
			return err
		}
		cis, frames = append(cis, ci), append(frames, append([]byte(nil), data...))
		bytes += 16 + int64(len(data))
	}
	if len(frames) == 0 {
		return errors.New(src + ": no packets")
	}
	span := cis[len(cis)-1].Timestamp.Sub(cis[0].Timestamp) + time.Second
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	w, err := pcap.NewWriter(bw, r.LinkType, 262144, true)
	if err != nil {
		out.Close()
		return err
	}
	for round, written := 0, int64(24); written < size; round++ {
		shift := time.Duration(round) * span
		for i, f := range frames {
			ci := cis[i]
			ci.Timestamp = ci.Timestamp.Add(shift)
			if err := w.WritePacket(ci, f); err != nil {
				out.Close()
				return err
			}
		}
		written += bytes
	}
	if err := errors.Join(w.Flush(), bw.Flush()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
