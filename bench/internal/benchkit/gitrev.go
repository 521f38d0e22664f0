package benchkit

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildRev builds plumb at a git revision of this repository, in a
// worktree under dir it removes after, and returns the binary's path:
// the benches measure earlier designs beside the current one in the
// same run.
func BuildRev(dir, rev string) (string, error) {
	wt := filepath.Join(dir, "rev-"+strings.NewReplacer("^", "p", "~", "t", "/", "_").Replace(rev))
	if out, err := exec.Command("git", "worktree", "add", "--detach", "--force", wt, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %v: %s", rev, err, out)
	}
	defer exec.Command("git", "worktree", "remove", "--force", wt).Run()
	bin := filepath.Join(dir, "plumb-"+filepath.Base(wt))
	build := exec.Command("go", "build", "-o", bin, "./cmd/plumb")
	build.Dir = wt
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %v: %s", rev, err, out)
	}
	return bin, nil
}
