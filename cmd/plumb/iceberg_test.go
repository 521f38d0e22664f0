package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/laketable"
	"github.com/plumb-dev/plumb/state"
)

// TestIcebergTableSurvivesKills SIGKILLs the server again and again while
// it writes a lake and keeps its Iceberg table in step (a sync every
// 20 ms, so kills land between a file's write and the catalog's commit,
// and inside commits). After the last restart the table holds each lake
// block's file once: as many files as blocks, and as many rows as the
// records of the capture.
func TestIcebergTableSurvivesKills(t *testing.T) {
	capture := "../../testdata/pcaps/dnscap__dnso1tcp-bighole.pcap"
	ref := filepath.Join(t.TempDir(), "ref.arrow")
	if out, errOut, code := plumbExec(t, "dns", "-o", ref, capture); code != 0 {
		t.Fatalf("plumb dns: %s %s", out, errOut)
	}
	want := int64(len(arrowTimes(t, ref)))
	data := t.TempDir()
	addr := testenv.FreeAddr(t)
	args := []string{"serve", "--data", data, "--listen", addr, "--log-level", "warn", "--tick", "50ms", "--iceberg-every", "20ms"}
	srv := startPlumb(t, args...)
	waitListening(t, addr)
	const job = `
job: lake
from: earliest
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: forever}
  - {name: lake, inputs: [dns.arrow], program: builtin:parquet, outputs: [dns.parquet], retention: forever}
`
	c := dialPlumb(t, addr)
	if res, err := c.SubmitJob(context.Background(), "lake.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	if out, errOut, code := plumbExec(t, "import", "--quiet", "--server", addr, "--site", "lax", "--new-instance",
		"--spool", filepath.Join(t.TempDir(), "spool"), "--block-size", "2KiB", capture); code != 0 {
		t.Fatalf("import: %s %s", out, errOut)
	}
	for round := range 6 {
		time.Sleep(time.Duration(40+round*35) * time.Millisecond)
		srv.cmd.Process.Signal(syscall.SIGKILL)
		srv.cmd.Wait()
		srv = startPlumb(t, args...)
		waitListening(t, addr)
	}
	// Runs the kills cut short run again (after their leases lapse, on
	// a slow machine some seconds); a run killed at every attempt sets
	// its block aside as FAULTY, as any failure does. Wait until every
	// capture block has its lake block or is set aside on the way.
	c = dialPlumb(t, addr)
	ctx := context.Background()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		src, err1 := c.Blocks(ctx, "pcap.sz")
		lake, err2 := c.Blocks(ctx, "dns.parquet")
		f1, err3 := c.Faulty(ctx, "pcap.sz")
		f2, err4 := c.Faulty(ctx, "dns.arrow")
		if err1 == nil && err2 == nil && err3 == nil && err4 == nil && len(src) > 0 && len(lake)+len(f1)+len(f2) == len(src) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the kills: %d capture blocks, %d lake blocks, %d and %d faulty; server log:\n%s", len(src), len(lake), len(f1), len(f2), srv.log)
		}
	}
	time.Sleep(time.Second) // syncs after the last run
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("plumb serve: %v\n%s", err, srv.log)
	}

	db, err := state.Open(filepath.Join(data, "meta.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := blob.OpenDir(filepath.Join(data, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tables, err := laketable.Open(context.Background(), filepath.Join(data, "iceberg"), db, store)
	if err != nil {
		t.Fatal(err)
	}
	defer tables.Close()
	// The table is the lake: its files, and the rows they hold.
	lake, err := db.Blocks("dns.parquet", 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var lakeRows int64
	for _, b := range lake {
		loc, err := store.Location(b.Key)
		if err != nil {
			t.Fatal(err)
		}
		f, err := file.OpenParquetFile(strings.TrimPrefix(loc, "file://"), false)
		if err != nil {
			t.Fatal(err)
		}
		lakeRows += f.NumRows()
		f.Close()
	}
	files, rows, _, err := tables.Sizes(context.Background(), "dns.parquet")
	if err != nil {
		t.Fatal(err)
	}
	if files != len(lake) || rows != lakeRows || len(lake) == 0 {
		t.Fatalf("after six SIGKILLs the table holds %d files and %d rows; the lake has %d blocks of %d rows", files, rows, len(lake), lakeRows)
	}
	t.Logf("%d lake blocks, %d rows (the capture has %d records)", len(lake), lakeRows, want)
}
