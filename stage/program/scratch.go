package program

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ScratchPrefixes start what runs make in a scratch directory: a run's
// directory is made with one of them, so what a dead process left is
// told from anything else kept there.
var ScratchPrefixes = []string{"run-", "stream-", "window-", "out-"}

// DeadScratch finds what runs left in dir that live does not claim (runs
// killed with their process leave their scratch behind), and with remove
// deletes it. It returns the entries and bytes found.
func DeadScratch(dir string, live func(path string) bool, remove bool) (entries int, bytes int64, err error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if !hasScratchPrefix(ent.Name()) || live != nil && live(p) {
			continue
		}
		entries++
		filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					bytes += fi.Size()
				}
			}
			return nil
		})
		if remove {
			if rerr := os.RemoveAll(p); rerr != nil && err == nil {
				err = rerr
			}
		}
	}
	return entries, bytes, err
}

func hasScratchPrefix(name string) bool {
	for _, p := range ScratchPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
