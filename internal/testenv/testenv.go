// Package testenv finds the outside tools tests need (xz, tcpdump, minio,
// python3 with pyarrow). On a developer machine a missing tool skips the
// test with a note of how to install it; in CI (CI=true) it fails, so a
// missing install step in .ci/run can never pass as green.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// InCI reports whether the tests run under CI, where every tool must exist.
func InCI() bool { return os.Getenv("CI") != "" }

// Tool returns the path of the named program, looked up in PATH, in the
// Go bin directory (where `go install` puts minio) and in /usr/sbin
// (where Debian puts daemons such as knotd, off a user's PATH).
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range append(goBinDirs(), "/usr/sbin") {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	Missing(t, name+" is not installed (.ci/run installs it)")
	return ""
}

// Missing skips the test outside CI and fails it in CI.
func Missing(t testing.TB, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required tool missing in CI: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

func goBinDirs() []string {
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	return dirs
}
