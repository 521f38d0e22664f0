package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"gopkg.in/yaml.v3"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// artifacts is where browser tests leave their screenshots for people.
func artifacts(t *testing.T) string {
	dir := os.Getenv("PLUMB_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// captureBlock is a minute of generated DNS traffic as a snappy block.
func captureBlock(t *testing.T, site string, seq uint64, at time.Time) client.Source {
	t.Helper()
	return seededBlock(t, site, seq, seq, at)
}

// statsBacklog runs `plumb stats` and returns each stage's backlog and
// faulty count as it prints them.
func statsBacklog(t *testing.T, addr string) map[string][3]int {
	t.Helper()
	out, errOut, code := plumbExec(t, "stats", "--server", addr)
	if code != 0 {
		t.Fatalf("plumb stats: exit %d: %s", code, errOut)
	}
	got := map[string][3]int{}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	head := strings.Fields(lines[0])
	backlog, waiting, faulty := slices.Index(head, "BACKLOG"), slices.Index(head, "WAITING"), slices.Index(head, "FAULTY")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) <= faulty || strings.Contains(l, ": ") {
			continue // a note under the table
		}
		b, _ := strconv.Atoi(f[backlog])
		w, _ := strconv.Atoi(f[waiting])
		n, _ := strconv.Atoi(f[faulty])
		got[f[0]] = [3]int{b, w, n}
	}
	return got
}

// TestDashboardInBrowser drives Debian's Chromium, headless, over the
// dashboard of a real server running four users' jobs (two sharing a
// stage, a window stage with a block missing, a stage that refuses every
// block): every stage and queue of `plumb graph` is drawn, the backlog and
// faulty numbers are those of `plumb stats`, a queue and a window can be
// clicked through, and no page raises a JavaScript error.
func TestDashboardInBrowser(t *testing.T) {
	addr, web := testenv.FreeAddr(t), testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--http", web, "--log-level", "warn",
		"--tick", "100ms", "--latency-every", "200ms", "--site-silent-after", "3s")
	waitListening(t, addr)
	waitListening(t, web)
	c := dialPlumb(t, addr)
	ctx := context.Background()

	hour := time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC)
	put := func(seq uint64, at time.Time) {
		t.Helper()
		if _, err := c.Put(ctx, captureBlock(t, "lax", seq, at)); err != nil {
			t.Fatal(err)
		}
	}
	put(1, hour.Add(5*time.Minute))
	for _, f := range []string{"alice-archive.yaml", "bob-summary.yaml"} {
		if out, errOut, code := plumbExec(t, "job", "submit", "--server", addr, filepath.Join("..", "..", "examples", "jobs", f)); code != 0 {
			t.Fatalf("submit %s: %s %s", f, out, errOut)
		}
	}
	for _, job := range []string{`
job: carol
owner: carol
from: earliest
stages:
  - {name: hourly, abstraction: window, window: {size: 1h}, inputs: [pcap.sz], program: [wc, -c], outputs: [pcap.count], retention: forever}
`, `
job: dave
owner: dave
from: earliest
stages:
  - {name: picky, inputs: [pcap.sz], program: [sh, -c, "echo picky: refuses every block >&2; exit 3"]}
`} {
		if res, err := c.SubmitJob(ctx, "job.yaml", []byte(job)); err != nil || res.State != "accepted" {
			t.Fatalf("submit: %+v %v", res, err)
		}
	}
	// Block 3 never comes: carol's 15:00 window waits for it, bracketed
	// by block 5 in the next hour.
	put(2, hour.Add(20*time.Minute))
	put(4, hour.Add(40*time.Minute))
	put(5, hour.Add(70*time.Minute))
	// A queue no job reads: site sfo ships twice now and then falls silent.
	probe := func(site string, seq uint64) {
		t.Helper()
		src := captureBlock(t, site, seq, hour.Add(time.Duration(seq)*time.Minute))
		src.Name = strings.Replace(src.Name, ".pcap.sz", ".probe.sz", 1)
		if _, err := c.Put(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	probe("sfo", 1)
	probe("sfo", 2)
	sfoShipped := time.Now()

	var graph struct {
		Stages []struct {
			Name            string
			Inputs, Outputs []string
		}
	}
	out, _, code := plumbExec(t, "graph", "--server", addr)
	if err := yaml.Unmarshal([]byte(out), &graph); err != nil || code != 0 || len(graph.Stages) != 5 {
		t.Fatalf("plumb graph (exit %d, %v):\n%s", code, err, out)
	}

	br := newBrowser(t)
	bctx, do, shot := br.ctx, br.do, br.shot
	do("open the graph", chromedp.Navigate("http://"+web+"/"), chromedp.WaitVisible(chromedp.CSS(`svg.graph g.stage`)))

	// Refresh the page's numbers, read them, and compare with plumb stats
	// until the pipeline settles: the shared stages idle, dave's blocks
	// all faulty, carol's window holding its blocks.
	type drawn struct {
		Stages  map[string][3]int `json:"stages"`
		Queues  []string          `json:"queues"`
		Red     string            `json:"red"`
		Doubles []string          `json:"doubles"`
		Waiting []string          `json:"waiting"`
	}
	var page drawn
	var stats map[string][3]int
	deadline := time.Now().Add(90 * time.Second)
	for {
		page = browse(t, bctx, "read the graph", chromedp.Evaluate[drawn](`render().then(() => {
			const out = {stages: {}, queues: [], red: '', doubles: [], waiting: []};
			for (const g of document.querySelectorAll('svg.graph g.stage')) {
				out.stages[g.dataset.stage] = [+g.dataset.backlog, +g.dataset.waiting, +g.dataset.faulty];
				if (g.querySelector('rect.outer')) out.doubles.push(g.dataset.stage);
				if (g.classList.contains('waiting')) out.waiting.push(g.dataset.stage);
			}
			for (const g of document.querySelectorAll('svg.graph g.queue')) out.queues.push(g.dataset.queue);
			const f = document.querySelector('svg.graph text.faulty');
			if (f) out.red = getComputedStyle(f).fill + ' ' + f.textContent;
			return out;
		})`, chromedp.EvalAwaitPromise))
		stats = statsBacklog(t, addr)
		// carol's blocks wait for her window by design: not backlog.
		settled := stats["dave/picky"] == [3]int{0, 0, 4} && stats["alice-archive/decode"] == [3]int{0, 0, 0} &&
			stats["alice-archive/archive"] == [3]int{0, 0, 0} && stats["bob-summary/summary"] == [3]int{0, 0, 0} && stats["carol/hourly"][0] == 0 && stats["carol/hourly"][1] > 0
		if settled && fmt.Sprint(page.Stages) == fmt.Sprint(stats) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page's backlog, waiting and faulty numbers never matched plumb stats on a settled pipeline:\npage:  %v\nstats: %v", page.Stages, stats)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, st := range graph.Stages {
		if _, ok := page.Stages[st.Name]; !ok {
			t.Errorf("stage %s of plumb graph is not drawn", st.Name)
		}
		for _, q := range append(st.Inputs, st.Outputs...) {
			if !slices.Contains(page.Queues, q) {
				t.Errorf("queue %s of plumb graph is not drawn", q)
			}
		}
	}
	if page.Red != "rgb(201, 42, 42) faulty 4" {
		t.Errorf("dave's faulty blocks drawn as %q; want red 'faulty 4'", page.Red)
	}
	// The metrics an autoscaler and an alert read say the same: carol's
	// blocks wait, they are not backlog.
	fams := scrapeFamilies(t, web)
	gauge := func(name, label string) float64 {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if b, s, w := gauge("plumb_consumer_backlog_blocks", "carol/hourly"), gauge("plumb_stage_backlog_blocks", "carol/hourly"),
		gauge("plumb_stage_window_waiting_blocks", "carol/hourly"); b != 0 || s != 0 || w != float64(stats["carol/hourly"][1]) {
		t.Errorf("carol's waiting window stage: consumer backlog %v, stage backlog %v, waiting %v; want 0, 0, %d", b, s, w, stats["carol/hourly"][1])
	}
	if fmt.Sprint(page.Waiting) != "[carol/hourly]" {
		t.Errorf("stages drawn as waiting for windows: %v; want carol's window stage only", page.Waiting)
	}
	if fmt.Sprint(page.Doubles) != "[alice-archive/decode]" {
		t.Errorf("stages drawn as merged: %v; want only the decode stage alice and bob share", page.Doubles)
	}
	owners := browse(t, bctx, "hover text", chromedp.TextContent(chromedp.CSS(`g.stage[data-stage="alice-archive/decode"] title`)))
	if !strings.Contains(owners, "alice-archive/decode (alice)") || !strings.Contains(owners, "bob-summary/decode (bob)") {
		t.Errorf("the shared stage's owners on hover: %q", owners)
	}
	do("screenshot", shot("graph"))

	// Click through to the source queue: each block's state per subscriber.
	do("open the queue", chromedp.Click(chromedp.CSS(`g.queue[data-queue="pcap.sz"] ellipse`)), chromedp.WaitVisible(chromedp.ID(`blocks`)), shot("queue"))
	table := browse(t, bctx, "read the blocks", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#blocks tr')].map(tr => [...tr.children].map(c => c.textContent))`))
	if len(table) != 5 {
		t.Fatalf("queue page lists %d rows; want a header and 4 blocks: %v", len(table), table)
	}
	decode, picky := slices.Index(table[0], "alice-archive/decode"), slices.Index(table[0], "dave/picky")
	if decode < 0 || picky < 0 {
		t.Fatalf("queue page columns %v lack the subscribers alice-archive/decode and dave/picky", table[0])
	}
	for _, row := range table[1:] {
		if row[decode] != "done" || !strings.HasPrefix(row[picky], "faulty") {
			t.Errorf("block %s: decode %q, picky %q; want done and faulty", row[0], row[decode], row[picky])
		}
	}

	// Click through to carol's open window: block 3 is missing.
	do("open the window", chromedp.Click(chromedp.CSS(`nav a[data-nav="windows"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#open-windows tr[data-missing="1"]`)),
		chromedp.Click(chromedp.CSS(`#open-windows tr[data-missing="1"] td`)),
		chromedp.WaitVisible(chromedp.ID(`window-missing`)), shot("window"))
	missing := browse(t, bctx, "read the window", chromedp.Text(chromedp.ID(`window-missing`)))
	state := browse(t, bctx, "read the window", chromedp.Text(chromedp.ID(`window-state`)))
	if missing != "lax:3" || state != "waiting" {
		t.Errorf("window page: state %q, missing %q; want waiting for lax:3", state, missing)
	}
	do("back to the windows", chromedp.NavigateBack(), chromedp.WaitVisible(chromedp.ID(`open-windows`)), shot("windows"))

	// The latency chart has a series for the stages that ran.
	do("open latency", chromedp.Click(chromedp.CSS(`nav a[data-nav="latency"]`)), chromedp.WaitVisible(chromedp.ID(`status`)),
		chromedp.WaitVisible(chromedp.CSS(`figure[data-chart] svg`)), shot("latency"))
	charts := browse(t, bctx, "read the charts", chromedp.Evaluate[[]string](`[...document.querySelectorAll('figure[data-chart]')].map(f => f.dataset.chart)`))
	if !slices.Contains(charts, "stage alice-archive/archive") {
		t.Errorf("latency charts %v lack alice's archive stage", charts)
	}

	// The workers page renders (no worker here: the server runs the stages).
	do("open workers", chromedp.Click(chromedp.CSS(`nav a[data-nav="workers"]`)), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="workers"]`)), shot("workers"))
	if txt := browse(t, bctx, "read workers", chromedp.Text(chromedp.CSS(`main`))); !strings.Contains(txt, "None: every stage runs on the server") {
		t.Errorf("workers page: %q", txt)
	}

	// Sites: lax shipped blocks 1, 2, 4 and 5 (3 is a gap); sfo fell
	// silent more than --site-silent-after ago; ams ships now.
	time.Sleep(time.Until(sfoShipped.Add(4 * time.Second)))
	probe("ams", 1)
	probe("ams", 2)
	do("open sites", chromedp.Click(chromedp.CSS(`nav a[data-nav="sites"]`)), chromedp.WaitVisible(chromedp.CSS(`#sites tr[data-site="probe.sz ams"]`)), shot("sites"))
	site := browse(t, bctx, "read the sites", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#sites tr[data-site]')].map(tr => tr.dataset.site + ' missing=' + tr.dataset.missing + ' ' + tr.children[2].textContent + ' ' + tr.children[3].textContent)`))
	if len(site) != 3 || !strings.HasPrefix(site[0], "pcap.sz lax missing=1 ") || !strings.HasSuffix(site[0], " 5") ||
		site[1] != "probe.sz ams missing=0 shipping 2" || site[2] != "probe.sz sfo missing=0 silent 2" {
		t.Errorf("sites page: %q; want lax at seq 5 with one block missing, ams shipping, sfo silent", site)
	}

	// Rates: a row and a chart per stage, and the edges that carried blocks.
	do("open rates", chromedp.Click(chromedp.CSS(`nav a[data-nav="rates"]`)), chromedp.WaitVisible(chromedp.CSS(`#rates tr[data-rate="pcap.sz → alice-archive/decode"]`)),
		chromedp.WaitVisible(chromedp.CSS(`figure[data-chart="stage alice-archive/decode"] svg`)), shot("rates"))
	// While the pipeline ran, blocks went along the edges: each chart's
	// scale tops at its busiest sample.
	for _, edge := range []string{"pcap.sz → alice-archive/decode", "alice-archive/decode → pcap", "pcap → bob-summary/summary"} {
		top := browse(t, bctx, "read a rate chart", chromedp.Evaluate[string](`document.querySelector('figure[data-chart="`+edge+`"] svg text').textContent`))
		if !strings.HasSuffix(top, "blk/s") || strings.HasPrefix(top, "0 ") {
			t.Errorf("rate chart of %s tops at %q; want the blocks/s it carried", edge, top)
		}
	}

	// Faulty: dave's four blocks with the error his program gave; an
	// admin (no --users here: everyone is) requeues one with two clicks.
	do("open faulty", chromedp.Click(chromedp.CSS(`nav a[data-nav="faulty"]`)), chromedp.WaitVisible(chromedp.ID(`faulty`)), shot("faulty"))
	rows := browse(t, bctx, "read faulty", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#faulty tr[data-block]')].map(tr => [tr.dataset.block, tr.dataset.group, tr.querySelector('td.error').textContent])`))
	if len(rows) != 4 {
		t.Fatalf("faulty page lists %d blocks; want dave's 4: %v", len(rows), rows)
	}
	for _, row := range rows {
		if row[1] != "dave/picky" || !strings.Contains(row[2], "picky: refuses every block") {
			t.Errorf("faulty row %v; want dave/picky with its stderr", row)
		}
	}
	retryButton := chromedp.CSS(`#faulty tr[data-block="` + rows[0][0] + `"] button`)
	do("retry a faulty block", chromedp.Click(retryButton), chromedp.WaitVisible(chromedp.CSS(`#faulty tr[data-block="`+rows[0][0]+`"] button.armed`)),
		chromedp.Click(retryButton), chromedp.WaitVisible(chromedp.CSS(`#flash.ok`)), shot("retried"))
	if flash := browse(t, bctx, "read the answer", chromedp.Text(chromedp.ID(`flash`))); flash != `retry: {"requeued":1}` {
		t.Errorf("after retry the page says %q", flash)
	}

	// Windows: fire carol's waiting window now, without block 3.
	fire := chromedp.CSS(`#open-windows tr[data-missing="1"] button`)
	do("fire the window", chromedp.Click(chromedp.CSS(`nav a[data-nav="windows"]`)), chromedp.WaitVisible(fire), chromedp.Click(fire),
		chromedp.WaitVisible(chromedp.CSS(`#open-windows tr[data-missing="1"] button.armed`)), chromedp.Click(fire),
		chromedp.WaitVisible(chromedp.CSS(`#fired-windows tr[data-missing="1"]`)), shot("fired"))
	if why := browse(t, bctx, "read the fired window", chromedp.Text(chromedp.CSS(`#fired-windows tr[data-missing="1"] td:last-child`))); why != "forced" {
		t.Errorf("the fired window's reason: %q; want forced", why)
	}

	// Jobs: retract dave's.
	retract := chromedp.CSS(`#jobs tr[data-job="dave"] button`)
	do("retract a job", chromedp.Click(chromedp.CSS(`nav a[data-nav="jobs"]`)), chromedp.WaitVisible(retract), chromedp.Click(retract),
		chromedp.WaitVisible(chromedp.CSS(`#jobs tr[data-job="dave"] button.armed`)), chromedp.Click(retract), chromedp.WaitVisible(chromedp.CSS(`#flash.ok`)))
	testenv.WaitFor(t, 30*time.Second, "dave's job to be retracted from the dashboard", func() bool {
		out, _, _ := plumbExec(t, "job", "list", "--server", addr)
		return strings.Contains(out, "retracted")
	})
	do("screenshot", shot("jobs"))

	br.checkJS()
}

// browse runs one browser action with a minute to finish.
func browse[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// browser is a headless Chromium for a test, counting every uncaught
// exception, console error and failed load its pages raise, and leaving
// screenshots in the test's artifacts.
type browser struct {
	t   *testing.T
	ctx context.Context
	art string

	mu       sync.Mutex
	jsErrors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	chromium := testenv.Tool(t, "chromium")
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1500, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, which lives as long as bctx
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start %s: %v", chromium, err)
	}
	b := &browser{t: t, ctx: bctx, art: artifacts(t)}
	cctx, stopConsole := context.WithCancel(bctx)
	var console sync.WaitGroup
	messages := chromedp.Console(cctx)
	console.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.jsErrors = append(b.jsErrors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				b.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		stopConsole()
		console.Wait()
		cancelBrowser()
		cancelAlloc()
	})
	return b
}

// shot saves a screenshot of the page as NAME.png.
func (b *browser) shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		png, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(b.art, name+".png"), png, 0o644)
	})
}

// do runs steps with a minute to finish; on failure the test ends with
// what the page showed instead.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	actx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(actx, steps...); err != nil {
		sctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		chromedp.Do(sctx, b.shot("failed"))
		text, _ := chromedp.Run(sctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("%s: %v; the page (screenshot failed.png) reads:\n%.2000s", what, err, text)
	}
}

// login makes every request of the page carry user's Basic credentials.
func (b *browser) login(user, secret string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if err := tg.Call(ctx, "Network.enable", map[string]any{}, nil); err != nil {
			return err
		}
		basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + secret))
		return tg.Call(ctx, "Network.setExtraHTTPHeaders", map[string]any{"headers": map[string]string{"Authorization": "Basic " + basic}}, nil)
	})
}

// checkJS fails the test if a page raised a JavaScript error.
func (b *browser) checkJS() {
	b.t.Helper()
	time.Sleep(300 * time.Millisecond) // the last page's messages
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.jsErrors) > 0 {
		b.t.Errorf("the pages raised %d JavaScript errors:\n%s", len(b.jsErrors), strings.Join(b.jsErrors, "\n"))
	}
	b.t.Logf("screenshots in %s", b.art)
}

// TestDashboardButtonsForAdmins: with --users, a reader sees the faulty
// block, its error and the jobs, and no button; an admin sees them with
// Retry and Retract, logged in as each in the browser.
func TestDashboardButtonsForAdmins(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users.yaml")
	secret := addUsers(t, users, [][2]string{{"ops", "operators"}, {"ana", "analysts"}})
	testenv.EditUsers(t, users, func(f *auth.File) {
		f.Rules = []auth.Rule{
			{Queues: "*", Groups: []string{"operators"}, Allow: []auth.Perm{auth.Admin}},
			{Queues: "pcap*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read}},
		}
	})
	addr, web := testenv.FreeAddr(t), testenv.FreeAddr(t)
	startPlumb(t, "serve", "--data", t.TempDir(), "--listen", addr, "--http", web, "--users", users, "--log-level", "warn", "--tick", "100ms")
	waitListening(t, addr)
	waitListening(t, web)
	ops, err := client.DialSecure(addr, client.Security{User: "ops", Secret: secret["ops"]})
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	ctx := context.Background()
	if _, err := ops.Put(ctx, captureBlock(t, "lax", 1, time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC))); err != nil {
		t.Fatal(err)
	}
	job := "job: dave\nfrom: earliest\nstages:\n  - {name: picky, inputs: [pcap.sz], program: [sh, -c, \"echo picky: refuses every block >&2; exit 3\"]}\n"
	if res, err := ops.SubmitJob(ctx, "dave.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	testenv.WaitFor(t, 60*time.Second, "the block to be set aside", func() bool {
		fb, err := ops.Faulty(ctx, "")
		return err == nil && len(fb) == 1
	})

	br := newBrowser(t)
	buttons := func(page string) []string {
		t.Helper()
		br.do("open "+page, chromedp.Navigate("http://"+web+"/#/"+page), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="`+page+`"]`)))
		return browse(t, br.ctx, "read the buttons", chromedp.Evaluate[[]string](`[...document.querySelectorAll('main button')].map(b => b.textContent)`))
	}
	br.do("log in as ana", br.login("ana", secret["ana"]))
	if b := buttons("faulty"); len(b) != 0 {
		t.Errorf("the reader ana sees buttons on the faulty page: %v", b)
	}
	if text := browse(t, br.ctx, "read faulty", chromedp.Text(chromedp.ID("faulty"))); !strings.Contains(text, "picky: refuses every block") {
		t.Errorf("ana's faulty page lacks the error:\n%s", text)
	}
	br.do("screenshot", br.shot("reader-faulty"))
	if b := buttons("jobs"); len(b) != 0 {
		t.Errorf("the reader ana sees buttons on the jobs page: %v", b)
	}
	br.do("log in as ops", br.login("ops", secret["ops"]))
	if b := buttons("faulty"); fmt.Sprint(b) != "[Retry all of pcap.sz Retry]" {
		t.Errorf("the admin ops sees buttons %v on the faulty page; want Retry all and Retry", b)
	}
	br.do("screenshot", br.shot("admin-faulty"))
	if b := buttons("jobs"); fmt.Sprint(b) != "[Retract]" {
		t.Errorf("the admin ops sees buttons %v on the jobs page; want Retract", b)
	}
	br.checkJS()
}
