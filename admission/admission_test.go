package admission

import (
	"context"
	"errors"
	"fmt"
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
	clk.add(500 * time.Millisecond) // the first transfer took half a second
	first(10)
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
	if est != 1200*time.Millisecond || actual != 3*time.Second {
		t.Errorf("observed estimate %v, actual %v; want 1.2s (1 s at 1 MB/s, ×1.2) and 3s", est, actual)
	}
}
