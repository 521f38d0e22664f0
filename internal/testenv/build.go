package testenv

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// PlumbBinary builds the plumb command without the race detector, for a
// test that measures a process's memory: the race detector's shadow
// memory multiplies it several times, so a race-built server's peak says
// little about the product's.
func PlumbBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plumb")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/plumb-dev/plumb/cmd/plumb")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/plumb: %v\n%s", err, out)
	}
	return bin
}
