package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// MinIO is a real MinIO server started for one test.
type MinIO struct {
	Endpoint  string // 127.0.0.1:PORT
	AccessKey string
	SecretKey string
}

// StartMinIO starts a MinIO server on a free loopback port with a temp data
// directory, waits until it is live, and stops it when the test ends.
func StartMinIO(t testing.TB) MinIO {
	t.Helper()
	bin := Tool(t, "minio")
	addr, console := FreeAddr(t), FreeAddr(t)
	m := MinIO{Endpoint: addr, AccessKey: "plumbtest", SecretKey: "plumbtest-secret"}
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	out, err := os.CreateTemp(t.TempDir(), "minio-log-*")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start minio: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		// Ready, not merely live: a live MinIO may still answer "server
		// not initialized" while it formats its disk.
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/minio/health/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return m
			}
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(out.Name())
			t.Fatalf("minio on %s did not become ready in 60s:\n%s", addr, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	// Not a port from the kernel's ephemeral range (":0"): the packages'
	// test binaries run at once, and a port one of them closed is handed
	// to the next socket anyone opens; a server that then fails to bind
	// leaves the test talking to a stranger on its port. Below 32768 no
	// one is handed ports, and a random pick makes two processes choosing
	// the same one unlikely.
	for range 100 {
		port := 20000 + rand.IntN(12000)
		addrMu.Lock()
		used := addrUsed[port]
		addrUsed[port] = true
		addrMu.Unlock()
		if used {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return fmt.Sprintf("127.0.0.1:%d", port)
	}
	t.Fatal("no free port in 20000-31999")
	return ""
}

var (
	addrMu   sync.Mutex
	addrUsed = map[int]bool{} // ports this process handed out
)
