// Command drain measures `plumb store drain`: the seconds to move a store
// of N GiB of blocks to another while readers run, beside a plain copy of
// the same bytes between the same two stores (the limit: the links and
// disks, nothing of Plumb's). Both stores are real MinIO servers started
// here. It prints MB/s and the ratio; the aim is at least 70%.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	minio := flag.String("minio", "", "minio binary (default: on PATH or in $(go env GOPATH)/bin)")
	gib := flag.Float64("gib", 1, "GiB of blocks on the store to drain")
	blockMiB := flag.Int("block", 16, "block size in MiB")
	workers := flag.Int("workers", 4, "blobs moved at once, by the drain and by the copy alike")
	readers := flag.Int("readers", 2, "readers reading random blocks during the drain")
	flag.Parse()
	if err := run(*plumb, *minio, int64(*gib*(1<<30)), int64(*blockMiB)<<20, *workers, *readers); err != nil {
		log.Fatal(err)
	}
}

func findMinIO(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, "go", "bin", "minio")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", errors.New("minio not found; `go install github.com/minio/minio@latest` (see .ci/run)")
}

// startMinIO runs a MinIO server on dir and waits until it is live.
func startMinIO(bin, dir string) (string, func(), error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	console, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, dir)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER=plumbbench", "MINIO_ROOT_PASSWORD=plumbbench-secret", "MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/minio/health/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return addr, stop, nil
			}
		}
	}
	stop()
	return "", nil, fmt.Errorf("minio on %s did not become ready", addr)
}

func run(plumb, minioPath string, total, size int64, workers, readers int) error {
	bin, err := findMinIO(minioPath)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "plumb-bench-drain-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a, stopA, err := startMinIO(bin, filepath.Join(dir, "a"))
	if err != nil {
		return err
	}
	defer stopA()
	b, stopB, err := startMinIO(bin, filepath.Join(dir, "b"))
	if err != nil {
		return err
	}
	defer stopB()
	os.Setenv("AWS_ACCESS_KEY_ID", "plumbbench")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "plumbbench-secret")
	n := int(total / size)
	fmt.Printf("drain bench: %d blocks of %d MiB (%.1f GiB) between two MinIO servers, %d at once, %d readers during the drain\n",
		n, size>>20, float64(int64(n)*size)/(1<<30), workers, readers)

	srv, c, err := benchkit.Serve(plumb, dir, "--store", "s3://primary?endpoint="+a)
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	var added map[string]string
	if err := c.Do(ctx, flight.ActStoreAdd, flight.StoreRequest{Name: "spot", URL: "s3://spot?endpoint=" + b}, &added); err != nil {
		return err
	}
	// Fill: new blocks go to both stores in turn; keep uploading until
	// the spot store holds n blocks.
	data := make([]byte, size)
	rand.Read(data)
	var names []string
	for seq := 1; len(names) < 2*n; seq++ {
		copy(data, fmt.Sprintf("block %08d", seq)) // distinct bytes per block
		sum := sha256.Sum256(data)
		nm := block.Name{Time: time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC), Seq: uint64(seq), Instance: "site", Queue: "pcap.sz"}.String()
		d := append([]byte(nil), data...)
		if _, err := c.Put(ctx, client.Source{Name: nm, Size: size, SHA256: hex.EncodeToString(sum[:]),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(d)), nil }}); err != nil {
			return err
		}
		names = append(names, nm)
	}

	// The limit: copy the same number of blobs between the two MinIO
	// servers with the blob package alone, the same number at once.
	from, err := blob.Open(ctx, "s3://primary?endpoint="+a)
	if err != nil {
		return err
	}
	to, err := blob.Open(ctx, "s3://plaincopy?endpoint="+b)
	if err != nil {
		return err
	}
	var keys []blob.Info
	from.List(ctx, func(i blob.Info) error { keys = append(keys, i); return nil })
	keys = keys[:min(len(keys), n)]
	start := time.Now()
	var copied atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	var copyErr error
	var mu sync.Mutex
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				k := keys[i]
				r, err := from.Open(ctx, k.Key)
				if err == nil {
					var sum blob.Sum
					sum, err = blob.ParseSum(k.Key[len(k.Key)-64:])
					if err == nil {
						err = to.Put(ctx, k.Key, r, k.Size, sum)
					}
					r.Close()
				}
				if err != nil {
					mu.Lock()
					copyErr = err
					mu.Unlock()
					return
				}
				copied.Add(k.Size)
			}
		})
	}
	wg.Wait()
	if copyErr != nil {
		return copyErr
	}
	plain := benchkit.Result{Name: "plain copy", Bytes: copied.Load(), Secs: time.Since(start).Seconds()}

	// The drain, with readers reading random blocks all along.
	rctx, stop := context.WithCancel(ctx)
	var reads, readErrs atomic.Int64
	for w := range readers {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(uint64(w), 1))
			rc, err := client.Dial(srv.Addr)
			if err != nil {
				readErrs.Add(1)
				return
			}
			defer rc.Close()
			for rctx.Err() == nil {
				s, err := rc.Get(rctx, names[r.IntN(len(names))])
				if err == nil && s.Next() {
					_, err = io.Copy(io.Discard, s)
					s.Close()
				}
				switch {
				case err != nil && rctx.Err() == nil:
					readErrs.Add(1)
				case err == nil:
					reads.Add(1)
				}
			}
		})
	}
	var rep blob.DrainReport
	err = c.Do(ctx, flight.ActStoreDrain, flight.StoreRequest{Name: "spot", DeadlineSeconds: 3600, Workers: workers}, &rep)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	drain := benchkit.Result{Name: "plumb store drain", Bytes: rep.Bytes, Secs: rep.Seconds}
	fmt.Printf("%-40s %8s %8s\n", "measurement", "MB/s", "seconds")
	for _, r := range []benchkit.Result{plain, drain} {
		fmt.Printf("%-40s %8.0f %8.2f\n", fmt.Sprintf("%s (%d MiB)", r.Name, r.Bytes>>20), r.MBps(), r.Secs)
	}
	fmt.Printf("reads during the drain: %d, failed: %d; blobs left: %d\n", reads.Load(), readErrs.Load(), len(rep.Left))
	fmt.Printf("drain / plain copy = %5.0f%%  (aim >= 70%%)\n", 100*drain.MBps()/plain.MBps())
	fmt.Printf("at this rate a 30 s preemption notice drains %.1f GiB\n", drain.MBps()*1e6*30/(1<<30))
	if readErrs.Load() > 0 || len(rep.Left) > 0 {
		return errors.New("reads failed or blobs were left during the drain")
	}
	return nil
}
