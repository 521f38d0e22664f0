package admission

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// waitQueued waits until n reads wait.
func waitQueued(t *testing.T, c *Controller, n int) {
	for deadline := time.Now().Add(5 * time.Second); c.Waiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", c.Waiting(), n)
		}
	}
}

func TestLeastLaxityFirst(t *testing.T) {
	clk := &clock{t: time.Now()} // contexts' deadlines are real times
	c := New(Config{Policy: LLF, Slots: 1, Rate: 1000, Safety: 1, Aging: 2 * time.Second, Now: clk.now})
	// 1000 B/s: 100 bytes take 0.1 s. The slot is taken.
	first, err := c.Acquire(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	ctxDue := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	// A hopeless read is refused at once: 3 s of transfer, 2 s left.
	if _, err := c.Acquire(ctxDue(2*time.Second), 3000); !errors.Is(err, ErrHopeless) {
		t.Fatalf("hopeless read: %v", err)
	}
	type req struct {
		name string
		ctx  context.Context
		size int64
	}
	events := make(chan string, 8) // "NAME" when granted, "NAME refused"
	finish := map[string]chan struct{}{}
	var wg sync.WaitGroup
	start := func(r req) {
		finish[r.name] = make(chan struct{})
		wg.Go(func() {
			done, err := c.Acquire(r.ctx, r.size)
			if err != nil {
				if !errors.Is(err, ErrHopeless) {
					t.Errorf("%s: %v", r.name, err)
				}
				events <- r.name + " refused"
				return
			}
			events <- r.name
			<-finish[r.name]
			clk.add(100 * time.Millisecond)
			done(r.size)
		})
	}
	for i, r := range []req{
		{"A", ctxDue(5 * time.Second), 100},        // laxity 4.9 s
		{"B", ctxDue(1 * time.Second), 100},        // laxity 0.9 s
		{"D", context.Background(), 100},           // no deadline: due after 2 s, laxity 1.9 s
		{"E", ctxDue(550 * time.Millisecond), 100}, // laxity 0.45 s: hopeless after waiting 0.5 s
	} {
		start(r)
		waitQueued(t, c, i+1)
	}
	// next returns the next grant, noting refusals on the way.
	var refused []string
	next := func() string {
		for e := range events {
			if len(e) > 8 && e[len(e)-8:] == " refused" {
				refused = append(refused, e[:len(e)-8])
				continue
			}
			return e
		}
		return ""
	}
	// The first transfer held the slot half a second; it sent nothing,
	// so the estimates stay at 1000 B/s.
	clk.add(500 * time.Millisecond)
	first(0)
	var grants []string
	for range 3 {
		g := next()
		grants = append(grants, g)
		if f, ok := finish[g]; ok {
			close(f)
		}
	}
	wg.Wait()
	close(events)
	for e := range events {
		refused = append(refused, e[:len(e)-8])
	}
	if fmt.Sprint(grants) != "[B D A]" || fmt.Sprint(refused) != "[E]" {
		t.Fatalf("granted %v, refused %v; want [B D A] (least laxity first, the deadline-less read aged), E refused", grants, refused)
	}
}

func TestFIFOServesInArrivalOrderAndRefusesNothing(t *testing.T) {
	clk := &clock{t: time.Now()} // contexts' deadlines are real times
	c := New(Config{Policy: FIFO, Slots: 1, Rate: 1000, Safety: 1, Now: clk.now})
	first, _ := c.Acquire(context.Background(), 10)
	order := make(chan string, 4)
	var wg sync.WaitGroup
	for i, name := range []string{"late", "urgent", "huge"} {
		ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(time.Duration(3-i)*time.Second))
		defer cancel()
		wg.Go(func() {
			done, err := c.Acquire(ctx, int64(100+i*10000))
			if err != nil {
				order <- name + ":" + err.Error()
				return
			}
			order <- name
			done(0)
		})
		waitQueued(t, c, i+1)
	}
	first(10)
	wg.Wait()
	close(order)
	var got []string
	for o := range order {
		got = append(got, o)
	}
	if len(got) != 3 || got[0] != "late" || got[1] != "urgent" || got[2] != "huge" {
		t.Fatalf("order %v", got)
	}
}

// TestPerUserShare: one user's reads hold at most half the slots, so a
// user whose streams stall (or who opens many) leaves room for others;
// their further reads wait their turn without losing their place.
func TestPerUserShare(t *testing.T) {
	c := New(Config{Policy: FIFO, Slots: 4})
	ctx := context.Background()
	var held []func(int64)
	for range 2 {
		done, err := c.AcquireFor(ctx, "a", 100)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, done)
	}
	third := make(chan func(int64), 1)
	go func() {
		done, _ := c.AcquireFor(ctx, "a", 100)
		third <- done
	}()
	for c.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-third:
		t.Fatal("a third read of one user got one of 4 slots")
	case <-time.After(50 * time.Millisecond):
	}
	// b gets a slot at once, though a's read waits before it.
	got := make(chan error, 1)
	go func() {
		done, err := c.AcquireFor(ctx, "b", 100)
		if err == nil {
			done(100)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("another user's read waited behind a user at its share")
	}
	held[0](100)
	select {
	case done := <-third:
		done(100)
	case <-time.After(time.Second):
		t.Fatal("a's waiting read did not get the slot a's own read gave back")
	}
	held[1](100)
}

// TestObserveEstimate: each finished transfer reports the estimate it
// was granted with and how long it took, for the estimate-error metric.
func TestObserveEstimate(t *testing.T) {
	clk := &clock{t: time.Unix(0, 0)}
	var est, actual time.Duration
	c := New(Config{Slots: 1, Rate: 1e6, Now: clk.now, Observe: func(e, a time.Duration) { est, actual = e, a }})
	done, err := c.Acquire(context.Background(), 1e6)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(3 * time.Second)
	done(1e6)
	if est != time.Second || actual != 3*time.Second {
		t.Errorf("observed estimate %v, actual %v; want 1s (1 MB at 1 MB/s) and 3s", est, actual)
	}
	if st := c.Stats(); st.Transfers != 1 || st.Late != 1 || st.RatioP50 != 3 || st.Rate != 1e6/3 {
		t.Errorf("stats %+v; want one transfer, late, at 3× its estimate, the rate now a third", st)
	}
}

// TestSlowdownRefusesBeforeDeadline: the service rate halves while reads
// wait. Reads admitted on the old rate that the new one cannot finish in
// time are refused at once, before their deadlines, and none is served
// late; the one that can still make it is served in time. (With a mean
// of the rates the estimate lagged, and such reads were granted and
// finished late.)
func TestSlowdownRefusesBeforeDeadline(t *testing.T) {
	clk := &clock{t: time.Now()}
	c := New(Config{Policy: LLF, Slots: 1, Rate: 1e6, Now: clk.now})
	const mb = 1 << 20
	// Eight transfers at 1 MiB/s teach the rate.
	for range 8 {
		done, err := c.Acquire(context.Background(), mb)
		if err != nil {
			t.Fatal(err)
		}
		clk.add(time.Second)
		done(mb)
	}
	due := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	// A takes the slot; B, C and D wait, each admitted: at 1 MiB/s they
	// would end at 2, 3 and 4 s.
	a, err := c.Acquire(due(10*time.Second), mb)
	if err != nil {
		t.Fatal(err)
	}
	start := clk.now()
	type result struct {
		name string
		err  error
		done func(int64)
	}
	results := make(chan result, 3)
	dueAt := map[string]time.Duration{"B": 2500 * time.Millisecond, "C": 3500 * time.Millisecond, "D": 10 * time.Second}
	for i, name := range []string{"B", "C", "D"} {
		r := struct{ name string }{name}
		ctx := due(dueAt[name])
		go func() {
			done, err := c.Acquire(ctx, mb)
			results <- result{r.name, err, done}
		}()
		waitQueued(t, c, i+1)
	}
	// The service rate halves: A takes 2 s.
	clk.add(2 * time.Second)
	a(mb)
	got := map[string]result{}
	for range 3 {
		r := <-results
		got[r.name] = r
		if r.err == nil {
			// Served at the new rate: in time?
			clk.add(2 * time.Second)
			if now := clk.now(); now.After(start.Add(dueAt[r.name])) {
				t.Errorf("%s served late: ended %v after the start, due at %v", r.name, now.Sub(start), dueAt[r.name])
			}
			r.done(mb)
		}
	}
	for name, want := range map[string]bool{"B": true, "C": true, "D": false} {
		if refused := errors.Is(got[name].err, ErrHopeless); refused != want {
			t.Errorf("%s: %v; want refused %v", name, got[name].err, want)
		}
	}
	if st := c.Stats(); st.Refused != 2 || st.Late != 1 {
		t.Errorf("stats %+v; want B and C refused, and only A late against its estimate", st)
	}
}

// TestRecheckRefusesReadPushedBack: a read admitted with time to spare
// is pushed back by a tighter read that arrives after it; its laxity is
// still positive, but less than its wait behind the other. Recheck
// refuses it then, a second before its deadline, instead of leaving it
// to be served late.
func TestRecheckRefusesReadPushedBack(t *testing.T) {
	clk := &clock{t: time.Now()}
	c := New(Config{Policy: LLF, Slots: 1, Rate: 1e6, Now: clk.now})
	due := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	// A runs: 100 kB at 1 MB/s, 0.1 s.
	a, err := c.Acquire(context.Background(), 100e3)
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	// B: 800 kB (0.8 s), due in 1 s: it can start up to 0.2 s from now.
	go func() { _, err := c.Acquire(due(time.Second), 800e3); results <- err }()
	waitQueued(t, c, 1)
	// C: 150 kB (0.15 s), due in 0.3 s: it goes before B, and B would end
	// at 0.1 + 0.15 + 0.8 = 1.05 s.
	go func() { _, err := c.Acquire(due(300*time.Millisecond), 150e3); results <- err }()
	waitQueued(t, c, 2)
	c.Recheck()
	select {
	case err := <-results:
		if !errors.Is(err, ErrHopeless) || !strings.Contains(err.Error(), "800000 bytes") {
			t.Fatalf("the first answer: %v; want B refused as hopeless", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B still waits after the recheck")
	}
	if c.Waiting() != 1 {
		t.Fatalf("%d waiting; want C", c.Waiting())
	}
	a(100e3)
	if err := <-results; err != nil {
		t.Errorf("C: %v", err)
	}
}

// A short read arriving while long transfers hold every slot waits only
// for the first of them to end. Counting the running transfers' whole
// work (not what is left of it) refused it though a slot was about to be
// free: under overload that refused most short reads.
func TestWaitIsTheRestOfRunningTransfers(t *testing.T) {
	clk := &clock{t: time.Now()}
	c := New(Config{Policy: LLF, Slots: 2, Express: -1, Rate: 1e6, PerUser: -1, Now: clk.now})
	// Two transfers of 1 MB: a second each at 1 MB/s (the speed they
	// then show, so the estimates stay).
	var dones []func(int64)
	for range 2 {
		done, err := c.Acquire(context.Background(), 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
	}
	clk.add(900 * time.Millisecond) // both nearly done
	// 10 kB (10 ms) due in 300 ms: it waits about 100 ms for a slot.
	ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(300*time.Millisecond))
	defer cancel()
	got := make(chan error, 1)
	go func() {
		done, err := c.Acquire(ctx, 10_000)
		if err == nil {
			done(10_000)
		}
		got <- err
	}()
	waitQueued(t, c, 1)
	c.Recheck()
	if c.Waiting() != 1 {
		t.Fatalf("the short read was refused by a recheck: %d waiting", c.Waiting())
	}
	clk.add(100 * time.Millisecond)
	dones[0](1_000_000)
	if err := <-got; err != nil {
		t.Fatalf("the short read: %v, want it served", err)
	}
	dones[1](1_000_000)
	if st := c.Stats(); st.Refused != 0 {
		t.Fatalf("refused %d reads, want 0", st.Refused)
	}
}

// Under LLF a short read due soon does not wait behind long transfers
// holding every slot: it takes an express slot at once. A long read due
// as soon is refused, and FIFO keeps one queue for all.
func TestExpressSlotsForShortReads(t *testing.T) {
	for _, policy := range []Policy{LLF, FIFO} {
		clk := &clock{t: time.Now()}
		c := New(Config{Policy: policy, Slots: 2, Express: 64 << 10, ExpressSlots: 1, Rate: 1e6, PerUser: -1, Now: clk.now})
		var dones []func(int64)
		for range 2 {
			done, err := c.Acquire(context.Background(), 1_000_000) // a second each
			if err != nil {
				t.Fatal(err)
			}
			dones = append(dones, done)
		}
		due := 20 * time.Millisecond
		if policy == FIFO {
			due = time.Minute // FIFO looks at no deadline; the wait below is on the real clock
		}
		ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(due))
		short := make(chan error, 1)
		go func() {
			done, err := c.Acquire(ctx, 4096) // 4 ms
			if err == nil {
				done(4096)
			}
			short <- err
		}()
		switch policy {
		case LLF:
			if err := <-short; err != nil {
				t.Errorf("LLF: a 4 KiB read due in 20 ms behind two 1-second transfers: %v, want it served at once", err)
			}
			if _, err := c.Acquire(ctx, 100_000); !errors.Is(err, ErrHopeless) {
				t.Errorf("LLF: a 100 kB read due in 20 ms: %v, want it refused", err)
			}
		case FIFO:
			waitQueued(t, c, 1)
			clk.add(time.Second)
			dones[0](1_000_000)
			if err := <-short; err != nil {
				t.Errorf("FIFO: %v", err)
			}
		}
		cancel()
		for _, d := range dones {
			d(1_000_000)
		}
	}
}

// A read keeps the margin (the way in and out, which the slots do not
// see) before its deadline: one that would finish inside it is refused.
func TestMarginRefusesReadsThatWouldArriveLate(t *testing.T) {
	clk := &clock{t: time.Now()}
	margin := 50 * time.Millisecond
	c := New(Config{Policy: LLF, Slots: 1, Rate: 1000, Now: clk.now, Margin: func() time.Duration { return margin }})
	c.Recheck() // takes the margin
	due := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	// 10 ms of transfer, 40 ms left: in time at the server, not with the
	// margin.
	if _, err := c.Acquire(due(40*time.Millisecond), 10); !errors.Is(err, ErrHopeless) {
		t.Fatalf("read inside the margin: %v, want it refused", err)
	}
	done, err := c.Acquire(due(80*time.Millisecond), 10)
	if err != nil {
		t.Fatalf("read with room for the margin: %v", err)
	}
	done(10)
	if st := c.Stats(); st.Margin != margin.Seconds() {
		t.Fatalf("stats margin %v, want %v", st.Margin, margin.Seconds())
	}
}

// SchedLatency sees goroutines wait to run when more are busy than there
// are processors.
func TestSchedLatencySeesBusyProcessors(t *testing.T) {
	s := NewSchedLatency()
	s.Sample()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for ctx.Err() == nil {
				for i := 0; i < 1_000_000; i++ {
				}
				runtime.Gosched()
			}
		})
	}
	for range 20 {
		time.Sleep(10 * time.Millisecond)
		s.Sample()
	}
	cancel()
	wg.Wait()
	if s.P99() <= 0 {
		t.Fatalf("p99 wait to run %v with every processor busy, want > 0", s.P99())
	}
	if s.Margin() < s.P99() {
		t.Fatalf("margin %v below the p99 wait %v", s.Margin(), s.P99())
	}
}
