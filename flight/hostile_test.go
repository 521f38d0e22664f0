package flight

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/plumb-dev/plumb/internal/hostile"
)

// TestArrowBombRefused is issue 18's records attack: a 33 KB Arrow IPC
// file whose ZSTD buffer claims 1 GiB, uploaded by a user who may write
// the queue, took +2.25 GB per records ticket (four at once 9 GB). The
// read now stops at the records budget with an error naming the block,
// four at once leave the heap near where it was, and the other blocks
// of the queue still read.
func TestArrowBombRefused(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file})
	ctx := context.Background()
	keyFile := t.TempDir() + "/key"
	os.WriteFile(keyFile, []byte(secrets["key"]), 0o600)
	agent := dialAs(t, addr, Security{TokenFile: keyFile})
	bomb, err := hostile.ArrowZstdBomb(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the bomb is %d bytes", len(bomb))
	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.arrow", bomb)); err != nil {
		t.Fatal(err)
	}
	ana := dialAs(t, addr, Security{User: "ana", Secret: secrets["ana"]})
	var before, peak runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			r, err := ana.Records(ctx, RecordsTicket{Records: "dns.arrow"})
			if err == nil {
				for r.Next() {
				}
				err = r.Err()
				r.Release()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; codeOf(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "20250505-151105-00000001.lax.dns.arrow") {
			t.Errorf("a records read of the bomb: %v", err)
		}
	}
	runtime.ReadMemStats(&peak)
	t.Logf("heap: %d MiB before, %d MiB of system memory after", before.HeapInuse>>20, peak.HeapSys>>20)
	if peak.HeapSys > before.HeapSys+1<<30 {
		t.Errorf("four reads of the bomb grew the heap from %d to %d MiB", before.HeapSys>>20, peak.HeapSys>>20)
	}
}
