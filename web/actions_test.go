package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/state"
	"github.com/plumb-dev/plumb/web"
)

// TestDashboardActions: the admin buttons' endpoints. An admin retries a
// faulty block and retracts a job; a reader may not; and neither a
// request another site makes the browser send (marked cross-site, or
// from another origin) nor a form post gets through with the admin's
// login, the CSRF attacks a dashboard on Basic auth invites.
func TestDashboardActions(t *testing.T) {
	r := newRig(t)
	script := filepath.Join(t.TempDir(), "picky.sh")
	os.WriteFile(script, []byte("#!/bin/sh\ndata=$(cat)\ncase \"$data\" in *poison*) echo picky: poison >&2; exit 3;; esac\nprintf '%s' \"$data\"\n"), 0o755)
	r.put(t, 1, "block 1")
	src := fmt.Sprintf("job: alice\nowner: ana\nfrom: earliest\nstages:\n  - {name: clean, inputs: [raw], program: [%s], outputs: [raw.clean]}\n", script)
	if res, err := r.ctl.Submit("alice.yaml", []byte(src), "ana"); err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	r.put(t, 2, "poison")

	_, authz, secrets := withUsers(t, "raw*", "ana", "ops", "eva")
	srv := httptest.NewServer(web.New(r.eng, r.ctl, r.db, r.reg, slog.Default()).WithAuth(authz).Handler())
	defer srv.Close()
	do := func(method, path, user, body string, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.SetBasicAuth(user, secrets[user])
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Sec-Fetch-Site", "same-origin") // as the dashboard's own page sends it
		}
		for k, v := range header {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	faulty := func() []state.FaultyBlock {
		t.Helper()
		_, body := do("GET", "/api/faulty", "ops", "", nil)
		var fb []state.FaultyBlock
		if err := json.Unmarshal([]byte(body), &fb); err != nil {
			t.Fatalf("/api/faulty: %v: %s", err, body)
		}
		return fb
	}
	var fb []state.FaultyBlock
	testenv.WaitFor(t, time.Minute, "the poisoned block to be set aside", func() bool {
		fb = faulty()
		return len(fb) > 0
	})
	if len(fb) != 1 || fb[0].Stage != "alice/clean" || !strings.Contains(fb[0].Error, "picky: poison") {
		t.Fatalf("faulty blocks: %+v; want the poisoned block of alice/clean with its stderr", fb)
	}
	name, first := fb[0].Block, fb[0].Attempts

	for user, admin := range map[string]bool{"ana": false, "ops": true} {
		if code, body := do("GET", "/api/me", user, "", nil); code != 200 || !strings.Contains(body, fmt.Sprintf(`"admin":%v`, admin)) {
			t.Errorf("/api/me as %s: %d %s; want admin %v", user, code, body, admin)
		}
	}

	retry := `{"queue":"raw","block":"` + name + `"}`
	for _, c := range []struct {
		why    string
		user   string
		body   string
		header map[string]string
		code   int
	}{
		{"a reader", "ana", retry, nil, 403},
		{"a page on another site (the browser marks it)", "ops", retry, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"another origin (an older browser)", "ops", retry, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, 403},
		{"a form post", "ops", "queue=raw&block=" + name, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"a field the action does not know", "ops", `{"queue":"raw","all":true}`, nil, 400},
		{"a body past the bound", "ops", `{"queue":"` + strings.Repeat("r", 8<<10) + `"}`, nil, 400},
	} {
		if code, body := do("POST", "/api/retry", c.user, c.body, c.header); code != c.code {
			t.Errorf("retry by %s: %d %s; want %d", c.why, code, body, c.code)
		}
	}
	if fb := faulty(); len(fb) != 1 || fb[0].Attempts != first {
		t.Fatalf("refused retries changed the faulty block: %+v", fb)
	}
	failed := func() int64 { return r.eng.Stats()[0].Failed }
	before := failed()
	if code, body := do("POST", "/api/retry", "ops", retry, nil); code != 200 || body != `{"requeued":1}`+"\n" {
		t.Fatalf("retry by an admin: %d %s", code, body)
	}
	// Requeued, the block runs again (and fails again, and is set aside
	// again).
	testenv.Eventually(t, time.Minute, "the retried block to run again", func() (string, bool) {
		fb := faulty()
		return fmt.Sprintf("%+v", fb), len(fb) == 1 && failed() >= before+int64(first)
	})

	// Retract: not by another reader, by the owner or an admin.
	if code, body := do("POST", "/api/retract", "eva", `{"job":"alice"}`, nil); code != 403 || !strings.Contains(body, "belongs to ana") {
		t.Errorf("retract by another user: %d %s", code, body)
	}
	if code, body := do("POST", "/api/retract", "ops", `{"job":"nosuch"}`, nil); code != 404 || !strings.Contains(body, "nosuch") {
		t.Errorf("retract of no job: %d %s", code, body)
	}
	if code, body := do("POST", "/api/retract", "ana", `{"job":"alice"}`, nil); code != 200 || !strings.Contains(body, `"retracted":"alice"`) {
		t.Errorf("retract by the owner: %d %s", code, body)
	}
	if _, body := do("GET", "/api/jobs", "ops", "", nil); !strings.Contains(body, `"state":"retracted"`) || strings.Contains(body, "picky.sh") {
		t.Errorf("jobs after the retraction (sources left out): %s", body)
	}
}

// TestDashboardSites: the Sites page's numbers for a site that went
// silent with a gap and kernel drops, one shipping now, and a finished
// import (its last block final), which is ended, not silent, from blocks
// whose arrival times a clock sets.
func TestDashboardSites(t *testing.T) {
	var mu sync.Mutex
	now := time.Now().Add(-2 * time.Hour)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	db, err := state.Open(filepath.Join(t.TempDir(), "meta.db"), state.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	put := func(site string, seq uint64, size, dropped int64) {
		t.Helper()
		n := fmt.Sprintf("20250505-150000-%08d.%s.pcap.sz", seq, site)
		sum := blob.Sum(sha256.Sum256([]byte(n)))
		if _, _, err := db.CommitBlock(state.Block{Name: n, Queue: "pcap.sz", Instance: site, Seq: seq, Time: time.Date(2025, 5, 5, 15, 0, 0, 0, time.UTC),
			Size: size, SHA256: sum.String(), Key: "k/" + n, KernelDropped: dropped, Final: site == "imp" && seq == 2}); err != nil {
			t.Fatal(err)
		}
	}
	start := clock()
	for seq := uint64(1); seq <= 2; seq++ { // imp: an import that ended two hours ago
		set(start)
		put("imp", seq, 500, 0)
	}
	for i, seq := range []uint64{1, 2, 4} { // lax: 3 never came, and it stopped two hours ago
		set(start.Add(time.Duration(i) * 5 * time.Minute))
		put("lax", seq, 3000, int64(i))
	}
	for seq := uint64(1); seq <= 3; seq++ { // nrt: every 5 minutes up to now
		set(time.Now().Add(-time.Duration(3-seq) * 5 * time.Minute))
		put("nrt", seq, 1000, 0)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: web.New(nil, nil, db, nil, slog.Default()).Handler()}
	go srv.Serve(lis)
	defer srv.Shutdown(context.Background())
	sites := getJSON[[]web.SiteRow](t, "http://"+lis.Addr().String()+"/api/sites")
	if len(sites) != 3 || sites[0].Site.Site != "imp" || sites[1].Site.Site != "lax" || sites[2].Site.Site != "nrt" {
		t.Fatalf("sites: %+v", sites)
	}
	if imp := sites[0]; imp.Silent || !imp.Ended {
		t.Errorf("imp = %+v; want a finished import ended, not silent", imp)
	}
	lax, nrt := sites[1], sites[2]
	if lax.Ended || nrt.Ended {
		t.Errorf("lax or nrt ended: %+v %+v", lax, nrt)
	}
	if !lax.Silent || lax.Missing != 1 || lax.LastSeq != 4 || lax.Last == nil || lax.Last.Seq != 4 || lax.KernelDropped != 0+1+2 ||
		lax.Blocks != 3 || lax.BytesPerSecond != 0 || time.Duration(lax.IntervalNS) != 5*time.Minute || time.Duration(lax.AgeNS) < 100*time.Minute {
		t.Errorf("lax = %+v; want silent for 1h50m (so 0 B/s now), seq 3 missing, 3 kernel drops, a block every 5m", lax)
	}
	// nrt: 3000 bytes since its first block, 10 minutes and a moment ago.
	if nrt.Silent || nrt.Missing != 0 || nrt.LastSeq != 3 || time.Duration(nrt.AgeNS) > time.Minute || nrt.BytesPerSecond > 3000.0/600 || nrt.BytesPerSecond < 3000.0/660 {
		t.Errorf("nrt = %+v; want shipping at about 5 B/s, no gap", nrt)
	}
}
