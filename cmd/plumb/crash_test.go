package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/internal/testprog"
)

// TestMain lets the test binary run as plumb, so tests can start, SIGKILL
// and restart real server processes.
func TestMain(m *testing.M) {
	if os.Getenv(testprog.CounterEnv) == "1" { // a stream program a server started
		testprog.CounterMain()
		os.Exit(0)
	}
	if os.Getenv("PLUMB_TEST_UDP_SENDER") != "" { // a fast sender in a test host
		udpSender(os.Getenv("PLUMB_TEST_UDP_SENDER"))
		os.Exit(0)
	}
	if os.Getenv("PLUMB_TEST_AS_PLUMB") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// plumbProc is a plumb subprocess.
type plumbProc struct {
	cmd *exec.Cmd
	log *procLog
}

// procLog is a subprocess's output, safe to read while it writes.
type procLog struct{ testenv.Log }

// waitLog waits until log says want, failing with the log (and any
// others given) if it does not within the given time.
func waitLog(t *testing.T, within time.Duration, log *procLog, want string, others ...fmt.Stringer) {
	t.Helper()
	testenv.Eventually(t, within, fmt.Sprintf("%q in the log", want), func() (string, bool) {
		l := log.String()
		return l + joinLogs(others), strings.Contains(l, want)
	})
}

// Without returns the log without its lines that contain noise (such
// as the thousand "will retry" lines of an agent waiting for space), and
// says how many it left out, so that a failure shows the line that
// matters.
func (l *procLog) Without(noise string) string {
	var b strings.Builder
	n := 0
	for _, line := range strings.SplitAfter(l.String(), "\n") {
		if strings.Contains(line, noise) {
			n++
			continue
		}
		b.WriteString(line)
	}
	fmt.Fprintf(&b, "(%d lines with %q left out)\n", n, noise)
	return b.String()
}

func startPlumb(t *testing.T, args ...string) *plumbProc {
	t.Helper()
	if len(args) > 0 && (args[0] == "serve" || args[0] == "worker") {
		// Helper programs of the tests re-run this binary: confined runs
		// must see it, as they would a tool an admin installed in /opt.
		args = append(args, "--run-ro", os.Args[0])
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PLUMB_TEST_AS_PLUMB=1")
	// A stage program the server started may outlive it, holding the
	// log pipe: waiting at cleanup must not hang on it.
	cmd.WaitDelay = 10 * time.Second
	p := &plumbProc{cmd: cmd, log: &procLog{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return p
}

// servePlumb starts `plumb serve` on a free address with the data
// directory data (and extra flags) and returns the address once it
// listens.
func servePlumb(t *testing.T, data string, extra ...string) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	startPlumb(t, append([]string{"serve", "--data", data, "--listen", addr, "--log-level", "warn"}, extra...)...)
	waitListening(t, addr)
	return addr
}

// dialPlumb connects to a server; the client is closed when the test ends.
func dialPlumb(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "a server on "+addr, func() (string, bool) {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return err.Error(), false
		}
		c.Close()
		return "", true
	})
}

type sent struct {
	src  client.Source
	data []byte
}

func makeBlock(round, i int) sent {
	r := rand.New(rand.NewPCG(uint64(round), uint64(i)))
	data := make([]byte, 16<<10+r.IntN(512<<10))
	for j := range data {
		data[j] = byte(r.Uint32())
	}
	sum := sha256.Sum256(data)
	name := fmt.Sprintf("20250505-151105-%08d.crash.pcap.sz", round*1000+i)
	return sent{data: data, src: client.Source{
		Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
	}}
}

// TestCrashDuringUploads SIGKILLs the server at random moments during 200
// concurrent uploads, 10 rounds. After each restart every acknowledged
// block is there and byte-identical, every visible block is complete and
// correct, and re-sent blocks are answered duplicate.
func TestCrashDuringUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test is long")
	}
	const rounds, uploads = 10, 200
	data := t.TempDir()
	addr := testenv.FreeAddr(t)
	all := map[string]sent{}   // every block ever sent, by name
	acked := map[string]bool{} // blocks the server acknowledged
	rng := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()

	for round := 1; round <= rounds; round++ {
		p := startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
		waitListening(t, addr)
		c, err := client.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Retries = 0 // an answer is exactly an ack

		blocks := make([]sent, uploads)
		for i := range blocks {
			blocks[i] = makeBlock(round, i)
			all[blocks[i].src.Name] = blocks[i]
		}
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		// Kill once a random number of uploads has been acknowledged, plus
		// a random few milliseconds, so each round dies at another point in
		// the middle of the work.
		killAt := 1 + rng.IntN(uploads-2)
		kill := make(chan struct{})
		var nacked int
		for _, b := range blocks {
			wg.Go(func() {
				res, err := c.Put(ctx, b.src)
				if err == nil && len(res) == 1 && (res[0].Status == "stored" || res[0].Status == "duplicate") {
					mu.Lock()
					acked[b.src.Name] = true
					if nacked++; nacked == killAt {
						close(kill)
					}
					mu.Unlock()
				}
			})
		}
		select {
		case <-kill:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: only %d uploads acknowledged in 60s\n%s", round, nacked, p.log)
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		wg.Wait()
		c.Close()

		// Restart and check.
		p = startPlumb(t, "serve", "--data", data, "--listen", addr, "--log-level", "warn")
		waitListening(t, addr)
		c, err = client.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		visible, err := c.Blocks(ctx, "pcap.sz")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, b := range visible {
			if seen[b.Name] {
				t.Fatalf("round %d: block %s listed twice", round, b.Name)
			}
			seen[b.Name] = true
			want, ok := all[b.Name]
			if !ok || b.Size != want.src.Size || b.SHA256 != want.src.SHA256 {
				t.Fatalf("round %d: visible block %s (%d bytes, %s) is not what was sent", round, b.Name, b.Size, b.SHA256)
			}
		}
		for name := range acked {
			if !seen[name] {
				t.Fatalf("round %d: acknowledged block %s is lost after SIGKILL", round, name)
			}
		}
		roundAcked := 0
		for _, b := range blocks {
			if acked[b.src.Name] {
				roundAcked++
			}
		}
		// Read back this round's blocks: byte-identical.
		for _, b := range blocks {
			if !seen[b.src.Name] {
				continue
			}
			s, err := c.Get(ctx, b.src.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Next() {
				t.Fatalf("round %d: get %s: %v", round, b.src.Name, s.Err())
			}
			got, err := io.ReadAll(s)
			s.Close()
			if err != nil || !bytes.Equal(got, b.data) {
				t.Fatalf("round %d: block %s read back wrong (%d bytes, %v)", round, b.src.Name, len(got), err)
			}
		}
		// Re-send everything of this round: stored blocks are duplicates,
		// the others are stored now.
		var srcs []client.Source
		for _, b := range blocks {
			srcs = append(srcs, b.src)
		}
		res, err := c.Put(ctx, srcs...)
		if err != nil {
			t.Fatalf("round %d: re-send: %v", round, err)
		}
		for i, r := range res {
			want := "stored"
			if seen[srcs[i].Name] {
				want = "duplicate"
			}
			if r.Status != want {
				t.Fatalf("round %d: re-sent %s answered %s, want %s", round, r.Name, r.Status, want)
			}
			acked[r.Name] = true
		}
		t.Logf("round %d: SIGKILL after %d of %d uploads were acknowledged; %d were visible; none lost", round, roundAcked, uploads, len(seen)-(round-1)*uploads)
		c.Close()
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("round %d: server exit on SIGTERM: %v\n%s", round, err, p.log)
		}
	}
	// No temp files of killed uploads are left visible as blocks.
	ents, _ := os.ReadDir(filepath.Join(data, "blobs", "tmp"))
	if len(ents) != 0 {
		t.Errorf("%d temp files left after a clean stop", len(ents))
	}
}
