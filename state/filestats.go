package state

import (
	"os"
	"time"
)

// FileStats is what the metadata file costs: its size, its free pages,
// and the writing of the commits since it was opened. An operator
// watching a server for years looks here for the commits getting
// slower as the file grows.
type FileStats struct {
	// Bytes is the file's size.
	Bytes int64
	// FreePages are pages a later commit may reuse: free, or freed by a
	// commit that an open reader may still see.
	FreePages int
	// PageWrites counts the writes of commits: one per run of dirty
	// pages, and one for the meta page.
	PageWrites int64
	// WriteTime is the time commits spent writing their pages and meta
	// page, each fdatasync included.
	WriteTime time.Duration
	// SpillTime is the time commits spent laying out their changed
	// nodes as pages before writing them.
	SpillTime time.Duration
}

// FileStats returns the metadata file's size and what its commits cost
// since it was opened; nothing when the metadata is not in a bbolt file.
func (d *DB) FileStats() FileStats {
	if d.bolt == nil {
		return FileStats{} // metadata not in a file
	}
	s := d.bolt.Stats()
	out := FileStats{
		FreePages:  s.FreePageN + s.PendingPageN,
		PageWrites: s.TxStats.GetWrite(),
		WriteTime:  s.TxStats.GetWriteTime(),
		SpillTime:  s.TxStats.GetSpillTime(),
	}
	if fi, err := os.Stat(d.bolt.Path()); err == nil {
		out.Bytes = fi.Size()
	}
	return out
}
