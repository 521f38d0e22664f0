//go:build unix

package enrich

import (
	"io/fs"
	"syscall"
)

// inode tells a file renamed over another from the one it replaced.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
