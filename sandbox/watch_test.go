package sandbox

import (
	"os/exec"
	"testing"
	"time"
)

// TestTreeCountsDescendants: the per-run sums follow a run's whole
// process tree, not only the process the server started.
func TestTreeCountsDescendants(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 5 & sleep 5 & (sleep 5 & sleep 5 & wait) & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(3 * time.Second)
	for {
		// sh, two sleeps, a subshell and its two sleeps.
		tasks, rss := tree(cmd.Process.Pid)
		if tasks == 6 && rss > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree of sh: %d tasks, %d bytes resident; want 6 tasks", tasks, rss)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
