package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// TestRetentionThroughServer: an operator gives a source queue a short
// retention; blocks nobody reads go, blobs too, while the ones a consumer
// group owes stay until it is done; with drop-unconsumed the group is told
// what it lost.
func TestRetentionThroughServer(t *testing.T) {
	data := t.TempDir()
	addr := servePlumb(t, data, "--sweep-every", "100ms")
	c := dialPlumb(t, addr)
	ctx := context.Background()
	for seq := 1; seq <= 3; seq++ {
		src, _ := snappyBlock(t, seq)
		if _, err := c.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
		if seq == 2 {
			// A consumer group that starts after block 2 owes block 3 only.
			if out, errOut, code := plumbExec(t, "follow", "pcap.sz", "--server", addr, "--group", "ids", "--out", t.TempDir(), "--once"); code != 0 {
				t.Fatalf("follow: %s %s", out, errOut)
			}
		}
	}
	if out, errOut, code := plumbExec(t, "retention", "pcap.sz", "1s", "--server", addr); code != 0 || !strings.Contains(out, `retention "1s"`) {
		t.Fatalf("retention: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := plumbExec(t, "retention", "pcap.sz", "soon", "--server", addr); code == 0 || !strings.Contains(errOut, "want forever, a duration") {
		t.Errorf("a bad retention: %d %s", code, errOut)
	}
	blobs := func() int {
		n := 0
		filepath.WalkDir(filepath.Join(data, "blobs", "blobs"), func(_ string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				n++
			}
			return nil
		})
		return n
	}
	testenv.Eventually(t, 30*time.Second, "blocks 1 and 2 to expire and 3 to stay", func() (string, bool) {
		out, _, _ := plumbExec(t, "blocks", "pcap.sz", "--server", addr)
		return fmt.Sprintf("blocks:\n%s\nblobs: %d", out, blobs()),
			!strings.Contains(out, "00000001") && !strings.Contains(out, "00000002") && strings.Contains(out, "00000003") && blobs() == 1
	})
	// Block 3 stays while ids owes it; dropping unconsumed blocks lets it go
	// and tells ids.
	time.Sleep(1500 * time.Millisecond)
	if out, _, _ := plumbExec(t, "blocks", "pcap.sz", "--server", addr); !strings.Contains(out, "00000003") {
		t.Fatalf("a block the group owes expired:\n%s", out)
	}
	plumbExec(t, "retention", "pcap.sz", "1s", "--drop-unconsumed", "--server", addr)
	testenv.Eventually(t, 30*time.Second, "block 3 listed as lost to ids", func() (string, bool) {
		out, _, _ := plumbExec(t, "lost", "pcap.sz", "--server", addr)
		return "lost: " + out, strings.Contains(out, "20250505-151105-00000003.site1.pcap.sz\tfor ids\tdropped unconsumed by retention 1s")
	})
	if out, _, _ := plumbExec(t, "retention", "--server", addr); !strings.Contains(out, "pcap.sz  1s         true") {
		t.Errorf("retention list:\n%s", out)
	}
}

// TestFsckThroughServer: a blob deleted behind the server's back and one
// left with no block are reported by plumb fsck, mended by --repair, and
// a second run is clean.
func TestFsckThroughServer(t *testing.T) {
	data := t.TempDir()
	addr := servePlumb(t, data)
	c := dialPlumb(t, addr)
	for seq := 1; seq <= 2; seq++ {
		src, _ := snappyBlock(t, seq)
		if _, err := c.Put(context.Background(), src); err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	filepath.WalkDir(filepath.Join(data, "blobs", "blobs"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 2 {
		t.Fatalf("blob files: %v", files)
	}
	os.Remove(files[0])
	os.WriteFile(filepath.Join(filepath.Dir(files[1]), "20250505-151105-00000009.site1.pcap.sz.sha256-"+strings.Repeat("0", 64)), []byte("orphan"), 0o640)
	out, _, code := plumbExec(t, "fsck", "--server", addr)
	if code == 0 || !strings.Contains(out, "2 blocks, 2 blobs: 1 missing, 0 corrupt, 0 orphan blobs (0 bytes), 1 young orphans") {
		t.Fatalf("fsck: %d\n%s", code, out)
	}
	if out, errOut, code := plumbExec(t, "fsck", "--repair", "--grace", "1ns", "--server", addr); code != 0 || !strings.Contains(out, "1 orphans deleted,") || !strings.Contains(out, "1 blocks marked lost") {
		t.Fatalf("fsck --repair: %d\n%s%s", code, out, errOut)
	}
	if out, _, code := plumbExec(t, "fsck", "--verify", "--server", addr); code != 0 || !strings.Contains(out, "1 blocks, 1 blobs: 0 missing, 0 corrupt, 0 orphan") {
		t.Fatalf("fsck after repair: %d\n%s", code, out)
	}
}
