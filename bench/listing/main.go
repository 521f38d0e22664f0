// Command listing measures how a server with a long window history
// answers window listings: an hourly window stage whose metadata holds
// 10^5 fired windows (eleven years of hours), listed as the dashboard's
// Windows page (/api/windows?limit=100) and `plumb windows` (the
// windows action, default limit 100) list them, and with a filter that
// matches nothing, which reads every window. Each listing is timed ten
// times; the median and the slowest are printed (aim: the dashboard's
// under 200 ms). Then a headless Chromium opens the dashboard's Windows
// page three times.
//
// The windows are written into the metadata file directly, with the
// server stopped: firing 10^5 windows one at a time through a server
// takes an hour, and the listing reads them the same way wherever they
// came from.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/chromedp/chromedp"
	bolt "go.etcd.io/bbolt"

	"github.com/plumb-dev/plumb/bench/internal/benchkit"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/state"
)

func main() {
	plumb := flag.String("plumb", "bin/plumb", "plumb binary")
	n := flag.Int("windows", 100000, "fired windows in the stage's history")
	flag.Parse()
	dir, err := os.MkdirTemp("", "plumb-bench-listing-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	web, err := benchkit.FreeAddr()
	if err != nil {
		log.Fatal(err)
	}
	start := func() *benchkit.Server {
		srv, err := benchkit.StartServer(*plumb, dir, "--http", web, "--tick", "100ms")
		if err != nil {
			log.Fatal(err)
		}
		return srv
	}
	srv := start()
	c, err := client.Dial(srv.Addr)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2014, 1, 1, 0, 0, 0, 0, time.UTC)
	// Two blocks an hour apart: the first hour is complete (the second
	// brackets it) and fires.
	for seq := uint64(1); seq <= 2; seq++ {
		name := block.Name{Time: t0.Add(time.Duration(seq-1) * time.Hour), Seq: seq, Instance: "lax", Queue: "raw"}
		if _, err := c.Put(ctx, client.BytesSource(name.String(), []byte(fmt.Sprintf("lax %d\n", seq)))); err != nil {
			log.Fatal(err)
		}
	}
	if res, err := c.SubmitJob(ctx, "hourly.yaml", []byte(`
job: hourly
from: earliest
stages:
  - {name: h, abstraction: window, window: {size: 1h}, inputs: [raw], program: [cat], outputs: [raw.hours], retention: forever}
`)); err != nil || res.State != "accepted" {
		log.Fatalf("submit: %v %+v", err, res)
	}
	// The first hour fires: the stage's record bucket exists.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ws, err := c.Windows(ctx, "hourly/h")
		if err == nil && slices.ContainsFunc(ws, func(w client.WindowView) bool { return w.State == "fired" }) {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("the first window did not fire in a minute (%v)", err)
		}
	}
	c.Close()
	srv.Stop()
	if err := addWindows(filepath.Join(dir, "data", "meta.db"), t0, *n); err != nil {
		log.Fatal(err)
	}
	srv = start()
	defer srv.Stop()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + web + "/api/windows?limit=1"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("the dashboard on %s did not answer in a minute", web)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("== window listings over %d fired windows of one hourly stage (loadavg %s)\n", *n+1, bytes.TrimSpace(load[:14]))
	fmt.Printf("%-58s %10s %10s %8s\n", "", "median", "slowest", "windows")
	get := func(query string) func() int {
		return func() int {
			resp, err := http.Get("http://" + web + "/api/windows" + query)
			if err != nil {
				log.Fatal(err)
			}
			defer resp.Body.Close()
			var ws []json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&ws); err != nil || resp.StatusCode != 200 {
				log.Fatalf("/api/windows%s: %s %v", query, resp.Status, err)
			}
			return len(ws)
		}
	}
	cli := func(args ...string) func() int {
		return func() int {
			out, err := exec.Command(*plumb, append([]string{"windows", "--server", srv.Addr}, args...)...).Output()
			if err != nil {
				log.Fatalf("plumb windows %v: %v", args, err)
			}
			return bytes.Count(out, []byte("\n")) - 1 // its header
		}
	}
	for _, m := range []struct {
		what string
		run  func() int
	}{
		{"dashboard: /api/windows?limit=100 (aim < 200 ms)", get("?limit=100")},
		{"dashboard: /api/windows (its default limit, 500)", get("")},
		{"plumb windows (default --limit 100; a process each)", cli()},
		{"plumb windows --state faulty (none: reads them all)", cli("--state", "faulty")},
		{"dashboard: /api/windows?site=nrt (a site with none)", get("?site=nrt")},
	} {
		var took []time.Duration
		count := 0
		for range 10 {
			s := time.Now()
			count = m.run()
			took = append(took, time.Since(s))
		}
		slices.Sort(took)
		fmt.Printf("%-58s %10s %10s %8d\n", m.what, took[len(took)/2].Round(100*time.Microsecond), took[len(took)-1].Round(100*time.Microsecond), count)
	}
	windowsPage(web)
}

// windowsPage opens the dashboard's Windows page in a headless Chromium,
// three times, and prints how long until its table of fired windows was
// drawn and how many rows it drew (the page that never loaded when it
// fetched every window).
func windowsPage(web string) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		fmt.Println("dashboard Windows page in Chromium: not measured, chromium is not installed (apt install chromium)")
		return
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(chromium), chromedp.NoSandbox)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	for i := range 3 {
		bctx, cancel := chromedp.NewContext(actx)
		ctx, stop := context.WithTimeout(bctx, time.Minute)
		if err := chromedp.Do(ctx); err != nil { // the browser started, before the clock
			log.Fatalf("start %s: %v", chromium, err)
		}
		s := time.Now()
		err := chromedp.Do(ctx, chromedp.Navigate("http://"+web+"/"), chromedp.WaitVisible(chromedp.CSS(`nav a[data-nav="windows"]`)),
			chromedp.Click(chromedp.CSS(`nav a[data-nav="windows"]`)), chromedp.WaitVisible(chromedp.CSS(`#fired-windows tr`)))
		took := time.Since(s)
		if err != nil {
			log.Fatalf("the Windows page did not draw its fired windows in a minute: %v", err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#fired-windows tr').length - 1`))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-58s %10s %10s %8d\n", fmt.Sprintf("dashboard Windows page in Chromium, load %d", i+1), took.Round(time.Millisecond), "", rows)
		stop()
		cancel()
	}
}

// addWindows writes n fired windows after t0's next hour (which waits
// for a block after it) into the stage's
// records, as the server's metadata keeps them (state.WindowRecord as
// JSON under windows/STAGE-GROUP/ID\x00REVISION).
func addWindows(path string, t0 time.Time, n int) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		ws := tx.Bucket([]byte("windows"))
		if ws == nil {
			return fmt.Errorf("%s holds no window records", path)
		}
		var group []byte
		ws.ForEach(func(k, v []byte) error {
			if v == nil {
				group = slices.Clone(k)
			}
			return nil
		})
		g := ws.Bucket(group)
		if g == nil {
			return fmt.Errorf("%s holds no window stage", path)
		}
		fired := time.Now().UTC()
		for i := 1; i <= n; i++ {
			from := t0.Add(time.Duration(i+1) * time.Hour)
			rec := state.WindowRecord{Stage: string(group), ID: fmt.Sprintf("lax/%d", from.Unix()/3600), Reason: "complete",
				From: from, To: from.Add(time.Hour), Fired: fired,
				Blocks:  []string{block.Name{Time: from, Seq: uint64(i + 1), Instance: "lax", Queue: "raw"}.String()},
				Outputs: []string{block.Name{Time: from, Seq: uint64(i+1) * 100, Instance: "lax", Queue: "raw.hours"}.String()}}
			raw, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			k := binary.BigEndian.AppendUint64(append([]byte(rec.ID), 0), 0)
			if err := g.Put(k, raw); err != nil {
				return err
			}
		}
		return nil
	})
}
