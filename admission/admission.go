// Package admission decides which waiting reads the server serves next
// when its read capacity (concurrent transfers) is used up. Under the
// least-laxity-first policy a read's laxity is its deadline minus now
// minus its estimated transfer time; the read with the least laxity goes
// first, and a read whose laxity has gone negative is refused at once
// rather than served late. Reads without a deadline age: they are ordered
// as if due a fixed time after they arrived, so they never starve. Under
// FIFO reads go in arrival order and nothing is refused.
//
// A transfer, once granted, runs to its end. So that a read due in
// milliseconds does not wait behind long transfers holding every slot,
// LLF gives reads of at most Config.Express bytes slots of their own.
//
// The estimate is conservative and recent: a transfer's time is its fixed
// cost plus its bytes at the time per byte of recent transfers, each
// taken at the 90th percentile of a short window of what the slots
// actually achieved (the store's speed, CPU contention and the clients'
// receive rates all show there), so a slowdown is seen within a few
// transfers and a past spell of speed is soon forgotten. Waiting reads
// are checked again as the estimate changes and every Recheck, so a read
// admitted before a slowdown that can no longer make its deadline is
// refused before the deadline, not served late.
//
// The clock is passed in, so tests and benchmarks run on virtual time.
package admission

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Policy orders waiting reads.
type Policy string

// Policies.
const (
	FIFO Policy = "fifo"
	LLF  Policy = "llf"
)

// ErrHopeless is returned for a read that cannot finish by its deadline;
// the error says the estimate.
var ErrHopeless = errors.New("the read cannot finish before its deadline")

// Config configures a Controller.
type Config struct {
	Policy Policy
	// Slots is how many transfers run at once; 16 when 0.
	Slots int
	// Express is the size at or under which a read under LLF takes one of
	// ExpressSlots slots of its own instead, with its own queue. Without
	// them a read due in 20 ms waited behind long transfers holding every
	// slot (a transfer, once granted, runs to its end): on a busy server
	// most reads LLF refused were due within 50 ms. 64 KiB when 0, no
	// express slots when negative. FIFO keeps one queue for all.
	Express int64
	// ExpressSlots is how many express transfers run at once; Slots when
	// 0.
	ExpressSlots int
	// Rate is the throughput assumed before any is measured, in bytes per
	// second per transfer; 100 MB/s when 0.
	Rate float64
	// Safety multiplies transfer estimates; 1 when 0 (the estimate is
	// already a 90th percentile).
	Safety float64
	// Window is how many recent transfers the estimate is taken from:
	// four times the slots, and at least 32, when 0.
	Window int
	// Aging is how long after arriving a read without a deadline counts as
	// due, for ordering; 2 s when 0.
	Aging time.Duration
	// Observe, when set, gets each finished transfer's estimate (made when
	// it was granted, safety factor included) and its actual duration:
	// how honest the admission is.
	Observe func(estimated, actual time.Duration)
	// PerUser is the most slots one user's reads hold at once, so one
	// user (or one user's stalled streams) cannot take them all: half the
	// slots when 0, none when negative. Reads over it wait while others'
	// go first.
	PerUser int
	// Margin, when set, is asked at every Recheck for how long before its
	// deadline a read must be done at the server for its reader to have
	// it in time (the request's way in and the bytes' way out, which the
	// slots do not see): SchedLatency.Margin measures it.
	Margin func() time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Controller admits reads.
type Controller struct {
	cfg Config
	mu  sync.Mutex
	// pools are the slots and their queues: all reads', then under LLF
	// the express reads'.
	pools   []*pool
	seq     uint64
	perByte ring // seconds per byte of recent big transfers
	fixed   ring // seconds of recent small transfers (the fixed cost)
	// spb and fix are the rings' 90th percentiles, kept as samples come:
	// estimates are made for every waiter at every grant.
	spb, fix float64
	// moved says the estimates changed since the waiters were ordered:
	// their keys moved by their sizes, and Recheck orders them again.
	moved  bool
	ratio  ring // actual ÷ estimated time of recent transfers
	stats  Stats
	margin time.Duration // Config.Margin at the last Recheck
	// arrived wakes Run when a read starts to wait.
	arrived chan struct{}
}

// pool is a set of slots, the transfers running in them and the reads
// waiting for them.
type pool struct {
	slots   int
	perUser int // the most slots one user holds; none when negative
	busy    int
	wait    waitHeap
	live    map[*transfer]struct{} // the transfers in progress
	held    map[string]int         // slots held per user
}

func (c *Controller) newPool(slots int) *pool {
	p := &pool{slots: slots, perUser: c.cfg.PerUser, live: map[*transfer]struct{}{}, held: map[string]int{}}
	if p.perUser == 0 {
		p.perUser = max(slots/2, 1)
	}
	p.wait.ctl = c
	return p
}

// poolFor is the pool a read of size bytes waits in.
func (c *Controller) poolFor(size int64) *pool {
	if len(c.pools) > 1 && size <= c.cfg.Express {
		return c.pools[1]
	}
	return c.pools[0]
}

// Stats says how honest the estimates are.
type Stats struct {
	// Transfers finished, and how many took longer than estimated.
	Transfers int64 `json:"transfers"`
	Late      int64 `json:"late_against_estimate"`
	// Refused reads (hopeless at arrival or while waiting).
	Refused int64 `json:"refused"`
	// RatioP50 and RatioP99 are of actual ÷ estimated time over the
	// recent transfers: above 1, estimates are low.
	RatioP50 float64 `json:"ratio_p50"`
	RatioP99 float64 `json:"ratio_p99"`
	// Rate is the bytes per second per transfer the estimate assumes now.
	Rate float64 `json:"rate_bytes_per_second"`
	// ExpiredWaiting are reads whose deadline passed while they waited
	// for a slot: the refusal came too late. PastDeadline are reads
	// granted a slot whose transfer ended (or was cut off) after their
	// deadline. Reads that a client saw late and that are in neither were
	// late before reaching the admission or after leaving the server.
	ExpiredWaiting int64 `json:"expired_waiting"`
	PastDeadline   int64 `json:"past_deadline"`
	// Margin is the slack, in seconds, each read keeps now for its way
	// in and out (Config.Margin).
	Margin float64 `json:"margin_seconds"`
}

// ring keeps the last n samples.
type ring struct {
	xs   []float64
	next int
	n    int
}

func (r *ring) add(x float64) {
	if len(r.xs) < r.n {
		r.xs = append(r.xs, x)
		return
	}
	r.xs[r.next] = x
	r.next = (r.next + 1) % r.n
}

// quantile is the nearest-rank q-quantile of the samples; ok is false
// when there are none.
func (r *ring) quantile(q float64) (float64, bool) {
	if len(r.xs) == 0 {
		return 0, false
	}
	xs := slices.Clone(r.xs)
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)], true
}

// New returns a controller.
func New(cfg Config) *Controller {
	if cfg.Policy == "" {
		cfg.Policy = LLF
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 16
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 100e6
	}
	if cfg.Safety <= 0 {
		cfg.Safety = 1
	}
	if cfg.Window <= 0 {
		cfg.Window = max(4*cfg.Slots, 32)
	}
	if cfg.Aging <= 0 {
		cfg.Aging = 2 * time.Second
	}
	if cfg.Express == 0 {
		cfg.Express = 64 << 10
	}
	if cfg.ExpressSlots <= 0 {
		cfg.ExpressSlots = cfg.Slots
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{cfg: cfg, spb: 1 / cfg.Rate, perByte: ring{n: cfg.Window}, fixed: ring{n: cfg.Window}, ratio: ring{n: 256},
		arrived: make(chan struct{}, 1)}
	c.pools = []*pool{c.newPool(cfg.Slots)}
	if cfg.Policy == LLF && cfg.Express > 0 {
		c.pools = append(c.pools, c.newPool(cfg.ExpressSlots))
	}
	if cfg.Margin != nil {
		// Rechecks run only while reads wait: the first reads are
		// judged with the margin as it stands at the start.
		c.margin = cfg.Margin()
	}
	return c
}

type waiter struct {
	user     string
	size     int64
	deadline time.Time // zero: none
	arrived  time.Time
	seq      uint64
	ready    chan error
	index    int
	granted  *transfer // once granted
}

// transfer is a granted read in progress: when it started, how long it
// was estimated to take, and the pool whose slot it holds.
type transfer struct {
	start time.Time
	est   time.Duration
	pool  *pool
}

// freeAt returns, for each slot of p, how long from now until it is free
// by the estimates: the rest of the transfer it runs, or 0.
func (p *pool) freeAt(now time.Time) []time.Duration {
	free := make([]time.Duration, p.slots)
	i := 0
	for t := range p.live {
		if i == len(free) {
			break
		}
		free[i] = max(t.start.Add(t.est).Sub(now), 0)
		i++
	}
	return free
}

// earliest is the index of the slot free soonest.
func earliest(free []time.Duration) int {
	j := 0
	for i, f := range free {
		if f < free[j] {
			j = i
		}
	}
	return j
}

// due is when a waiter counts as due for ordering.
func (c *Controller) due(w *waiter) time.Time {
	if w.deadline.IsZero() {
		return w.arrived.Add(c.cfg.Aging)
	}
	return w.deadline
}

// Estimate is the expected transfer time of size bytes.
func (c *Controller) Estimate(size int64) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.estimate(size)
}

func (c *Controller) estimate(size int64) time.Duration {
	return time.Duration((c.fix + float64(size)*c.spb) * c.cfg.Safety * float64(time.Second))
}

// Stats returns how the estimates fared.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	st.RatioP50, _ = c.ratio.quantile(0.5)
	st.RatioP99, _ = c.ratio.quantile(0.99)
	st.Rate = 1 / c.spb
	st.Margin = c.margin.Seconds()
	return st
}

// Recheck refuses the waiting reads that can no longer make their
// deadlines, as the clock moves with no transfer ending.
//
// Under LLF a waiting read counts as hopeless once its laxity is less
// than its expected wait: until a slot is free for it once the transfers
// running end and the reads ahead of it in LLF order have each taken the
// slot free soonest (list scheduling by the estimates). Reads that jump
// ahead of it after it was admitted make its wait longer; refusing it
// then, while its deadline is still ahead, beats letting it time out in
// the queue.
func (c *Controller) Recheck() {
	var margin time.Duration
	if c.cfg.Margin != nil {
		margin = c.cfg.Margin() // outside the lock: it reads the runtime's metrics
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.margin = margin
	now := c.cfg.Now()
	for _, p := range c.pools {
		if c.moved {
			heap.Init(&p.wait)
		}
		if c.cfg.Policy == LLF && len(p.wait.items) > 0 {
			order := slices.Clone(p.wait.items)
			slices.SortFunc(order, func(a, b *waiter) int { return c.key(a).Compare(c.key(b)) })
			free := p.freeAt(now)
			for _, w := range order {
				i := earliest(free)
				wait := free[i]
				if !w.deadline.IsZero() && c.laxity(w, now)-wait < 0 {
					heap.Remove(&p.wait, w.index)
					c.refuse(w, wait, now)
					continue
				}
				free[i] += c.estimate(w.size)
			}
		}
		c.grant(p, now)
	}
	c.moved = false
}

// refuse answers a waiting read that can no longer make its deadline
// after wait more of waiting.
func (c *Controller) refuse(w *waiter, wait time.Duration, now time.Time) {
	c.stats.Refused++
	w.ready <- fmt.Errorf("%w: %d bytes need about %v after about %v more of waiting, %v are left (waited %v)", ErrHopeless, w.size,
		c.estimate(w.size).Round(time.Millisecond), wait.Round(time.Millisecond), w.deadline.Sub(now).Round(time.Millisecond), now.Sub(w.arrived).Round(time.Millisecond))
}

// Run rechecks the waiting reads every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if c.Waiting() == 0 {
			// Nothing to recheck: an idle server sleeps here instead of
			// waking 200 times a second to sample the runtime.
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-c.arrived:
			}
			c.Recheck() // the margin and the order, fresh for the reads now waiting
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Recheck()
		}
	}
}

// laxity is the slack of a read at now, were it granted a slot at once.
func (c *Controller) laxity(w *waiter, now time.Time) time.Duration {
	return c.due(w).Sub(now) - c.estimate(w.size) - c.margin
}

// key orders waiters under LLF: the latest moment a read can start.
func (c *Controller) key(w *waiter) time.Time { return c.due(w).Add(-c.estimate(w.size)) }

// queued estimates how long a read would wait for a slot: until one is
// free once the transfers in progress end and the waiters that go before
// it have each taken the slot free soonest. Counting the running
// transfers' whole work instead of what is left of it refused short
// reads whenever long ones held the slots, though a slot was about to be
// free.
func (c *Controller) queued(p *pool, w *waiter, now time.Time) time.Duration {
	free := p.freeAt(now)
	if len(p.wait.items) > exactQueue {
		// Many wait: the work of them all spread over the slots, after the
		// longest of the running transfers, a bound found in O(slots)
		// (Recheck refines it every few milliseconds).
		all := time.Duration((float64(len(p.wait.items))*c.fix + float64(p.wait.bytes)*c.spb) * c.cfg.Safety * float64(time.Second))
		return slices.Max(free) + all/time.Duration(p.slots)
	}
	k := c.key(w)
	ahead := make([]*waiter, 0, len(p.wait.items))
	for _, o := range p.wait.items {
		if o != w && !c.key(o).After(k) {
			ahead = append(ahead, o)
		}
	}
	slices.SortFunc(ahead, func(a, b *waiter) int { return c.key(a).Compare(c.key(b)) })
	for _, o := range ahead {
		free[earliest(free)] += c.estimate(o.size)
	}
	return free[earliest(free)]
}

// exactQueue is how many waiters the admission of a read sums the work of
// one by one; past it, it takes the total.
const exactQueue = 256

// Acquire waits for a transfer slot for a read of size bytes that must
// finish by the context's deadline (if any). Call the returned done with
// the bytes sent when the transfer ends. Under LLF a hopeless read gets
// ErrHopeless, at once or when it would next be chosen.
func (c *Controller) Acquire(ctx context.Context, size int64) (done func(sent int64), err error) {
	return c.AcquireFor(ctx, "", size)
}

// AcquireFor is Acquire for a read of user, whose reads together hold at
// most the per-user share of the slots.
func (c *Controller) AcquireFor(ctx context.Context, user string, size int64) (done func(sent int64), err error) {
	deadline, _ := ctx.Deadline()
	now := c.cfg.Now()
	c.mu.Lock()
	w := &waiter{user: user, size: size, deadline: deadline, arrived: now, seq: c.seq, ready: make(chan error, 1)}
	c.seq++
	p := c.poolFor(size)
	if c.cfg.Policy == LLF && !deadline.IsZero() {
		wait := time.Duration(0)
		if p.busy >= p.slots {
			wait = c.queued(p, w, now)
		}
		if c.laxity(w, now)-wait < 0 {
			est := c.estimate(size)
			c.stats.Refused++
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %d bytes need about %v after about %v of waiting, %v are left", ErrHopeless, size,
				est.Round(time.Millisecond), wait.Round(time.Millisecond), deadline.Sub(now).Round(time.Millisecond))
		}
	}
	if p.busy < p.slots && p.wait.Len() == 0 && p.mayHold(user) {
		t := p.start(user, now, c.estimate(size))
		c.mu.Unlock()
		return c.release(t, user, deadline), nil
	}
	heap.Push(&p.wait, w)
	// Slots may be free while every waiter before this one is of users
	// at their share.
	c.grant(p, now)
	select {
	case c.arrived <- struct{}{}:
	default:
	}
	c.mu.Unlock()
	select {
	case err := <-w.ready:
		if err != nil {
			return nil, err
		}
		return c.release(w.granted, user, deadline), nil
	case <-ctx.Done():
		c.mu.Lock()
		if w.index >= 0 {
			heap.Remove(&p.wait, w.index)
			if !deadline.IsZero() {
				c.stats.ExpiredWaiting++
			}
			c.mu.Unlock()
			return nil, ctx.Err()
		}
		c.mu.Unlock()
		// Granted while giving up: hand the slot on.
		if err := <-w.ready; err == nil {
			c.release(w.granted, user, time.Time{})(0)
		}
		return nil, ctx.Err()
	}
}

// release returns the done func of a granted slot.
// someMayHold reports whether a waiting read's user may take a slot: when
// none may, every waiter would be popped and pushed back for nothing (a
// lone client at its share with thousands waiting made each grant cost
// O(n log n)).
func (p *pool) someMayHold() bool {
	if p.perUser < 0 {
		return true
	}
	for u, n := range p.wait.users {
		if n > 0 && p.mayHold(u) {
			return true
		}
	}
	return false
}

// mayHold reports whether user may take one more slot of p.
func (p *pool) mayHold(user string) bool {
	return p.perUser < 0 || p.held[user] < p.perUser
}

// start takes a slot of p for a transfer of user estimated to take est.
func (p *pool) start(user string, now time.Time, est time.Duration) *transfer {
	t := &transfer{start: now, est: est, pool: p}
	p.busy++
	p.held[user]++
	p.live[t] = struct{}{}
	return t
}

func (c *Controller) release(t *transfer, user string, deadline time.Time) func(sent int64) {
	start, est := t.start, t.est
	var once sync.Once
	return func(sent int64) {
		once.Do(func() {
			now := c.cfg.Now()
			c.mu.Lock()
			defer c.mu.Unlock()
			if !deadline.IsZero() && now.After(deadline) {
				c.stats.PastDeadline++
			}
			// Learn the transfer model from what the slots achieve: big
			// transfers tell the time per byte, small ones the fixed cost.
			if d := now.Sub(start); d > 0 && sent > 0 {
				if c.cfg.Observe != nil && est > 0 {
					c.cfg.Observe(est, d)
				}
				if est > 0 {
					c.stats.Transfers++
					if d > est {
						c.stats.Late++
					}
					c.ratio.add(d.Seconds() / est.Seconds())
				}
				spb, fix := c.spb, c.fix
				if sent >= 256<<10 {
					c.perByte.add(d.Seconds() / float64(sent))
					c.spb, _ = c.perByte.quantile(0.9)
				} else if sent <= 16<<10 {
					c.fixed.add(d.Seconds())
					c.fix, _ = c.fixed.quantile(0.9)
				}
				c.moved = c.moved || c.spb != spb || c.fix != fix
			}
			p := t.pool
			p.busy--
			if p.held[user]--; p.held[user] <= 0 {
				delete(p.held, user)
			}
			delete(p.live, t)
			c.grant(p, now)
		})
	}
}

// grant hands free slots to waiters; under LLF it first refuses every
// waiter that can no longer make its deadline, so none holds a slot in
// vain or waits to be late.
func (c *Controller) grant(p *pool, now time.Time) {
	// In the policy's order, skipping the reads of users at their share
	// (they keep their places). Each costs O(log n): a sweep of every
	// waiter here, at every transfer's end, made the controller the
	// bottleneck once thousands waited (Recheck sweeps instead).
	var skipped []*waiter
	for p.busy < p.slots && p.wait.Len() > 0 && p.someMayHold() {
		w := heap.Pop(&p.wait).(*waiter)
		if c.cfg.Policy == LLF && !w.deadline.IsZero() && c.laxity(w, now) < 0 {
			c.refuse(w, 0, now)
			continue
		}
		if !p.mayHold(w.user) {
			skipped = append(skipped, w)
			continue
		}
		w.granted = p.start(w.user, now, c.estimate(w.size))
		w.ready <- nil
	}
	for _, w := range skipped {
		heap.Push(&p.wait, w)
	}
}

// Waiting returns how many reads wait.
func (c *Controller) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.pools {
		n += p.wait.Len()
	}
	return n
}

// waitHeap orders waiters by the policy.
type waitHeap struct {
	items []*waiter
	ctl   *Controller
	bytes int64          // of every waiter
	users map[string]int // waiters per user
}

func (h waitHeap) Len() int { return len(h.items) }

func (h waitHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.ctl == nil || h.ctl.cfg.Policy == FIFO {
		return a.seq < b.seq
	}
	// Least laxity first: earliest due minus estimate; the clock cancels.
	la, lb := h.ctl.key(a), h.ctl.key(b)
	if !la.Equal(lb) {
		return la.Before(lb)
	}
	return a.seq < b.seq
}

func (h waitHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}

func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(h.items)
	h.items = append(h.items, w)
	h.bytes += w.size
	if h.users == nil {
		h.users = map[string]int{}
	}
	h.users[w.user]++
}

func (h *waitHeap) Pop() any {
	old := h.items
	w := old[len(old)-1]
	h.items = old[:len(old)-1]
	w.index = -1
	h.bytes -= w.size
	if h.users[w.user]--; h.users[w.user] <= 0 {
		delete(h.users, w.user)
	}
	return w
}
