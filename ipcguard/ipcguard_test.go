package ipcguard_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/plumb-dev/plumb/internal/hostile"
	"github.com/plumb-dev/plumb/ipcguard"
)

// TestBudgetStopsAClaim: an Arrow file whose ZSTD or LZ4 buffer claims
// 1 GiB is refused at the budget instead of allocated.
func TestBudgetStopsAClaim(t *testing.T) {
	for codec, bombOf := range map[string]func(int64) ([]byte, error){"zstd": hostile.ArrowZstdBomb, "lz4": hostile.ArrowLZ4Bomb} {
		bomb, err := bombOf(1 << 30)
		if err != nil {
			t.Fatal(err)
		}
		if err := ipcguard.CheckFile(bomb); err != nil {
			t.Fatalf("%s: the footer is sound; only the claim is not: %v", codec, err)
		}
		f, err := ipc.NewFileReader(bytes.NewReader(bomb), ipc.WithAllocator(ipcguard.NewBudget(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.RecordBatch(0); !errors.Is(err, ipcguard.ErrOverBudget) {
			t.Errorf("%s: reading the 1 GiB claim under a 64 MiB budget: %v", codec, err)
		}
		f.Close()
	}
}

// FuzzCheckFile: whatever bytes pass CheckFile, arrow-go's file reader
// neither panics past its own recovery nor allocates beyond the budget
// (the test runs under the budget, so an allocation past it fails).
func FuzzCheckFile(f *testing.F) {
	for _, bombOf := range []func(int64) ([]byte, error){hostile.ArrowZstdBomb, hostile.ArrowLZ4Bomb} {
		bomb, _ := bombOf(1 << 30)
		f.Add(bomb)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if ipcguard.CheckFile(data) != nil {
			return
		}
		ipcguard.Under(func() error {
			r, err := ipc.NewFileReader(bytes.NewReader(data), ipc.WithAllocator(ipcguard.NewBudget(64<<20)))
			if err != nil {
				return err
			}
			defer r.Close()
			for i := 0; i < r.NumRecords(); i++ {
				if rec, err := r.RecordBatch(i); err == nil {
					rec.Release()
				}
			}
			return nil
		})
	})
}
