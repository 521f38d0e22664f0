package main

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/client"
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
	// a slow machine some seconds): wait for the lake to hold every
	// block's rows.
	c = dialPlumb(t, addr)
	ctx := context.Background()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		src, err1 := c.Blocks(ctx, "pcap.sz")
		lake, err2 := c.Blocks(ctx, "dns.parquet")
		var rows int64
		if tbl, err := c.RecordsTable(ctx, client.RecordsTicket{Records: "dns.arrow", Columns: []string{"time"}}); err == nil {
			rows = tbl.NumRows()
			tbl.Release()
		}
		if err1 == nil && err2 == nil && len(src) > 0 && len(lake) == len(src) && rows == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the kills: %d capture blocks, %d lake blocks, %d records of %d; server log:\n%s", len(src), len(lake), rows, want, srv.log)
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
	lake, err := db.Queue("dns.parquet")
	if err != nil {
		t.Fatal(err)
	}
	files, rows, _, err := tables.Sizes(context.Background(), "dns.parquet")
	if err != nil {
		t.Fatal(err)
	}
	if files != int(lake.Blocks) || rows != want {
		t.Fatalf("after six SIGKILLs the table holds %d files and %d rows; the lake has %d blocks, the capture %d records", files, rows, lake.Blocks, want)
	}
}
