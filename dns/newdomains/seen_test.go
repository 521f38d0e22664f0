package newdomains

import (
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func small() Config {
	return Config{Horizon: 4 * 24 * time.Hour, Generations: 4, Capacity: 10000, FalsePositive: 0.01}
}

// TestNoFalseNegativesAndTheRate: every domain asked for is known after,
// and of domains never asked for, no more than the stated rate are
// taken as known with every generation full.
func TestNoFalseNegativesAndTheRate(t *testing.T) {
	c := small()
	s := New(c)
	// Fill every generation to its capacity, a day each.
	for g := range c.Generations {
		at := t0.Add(time.Duration(g) * 24 * time.Hour)
		for i := range c.Capacity - 1 {
			if !s.Observe(fmt.Sprintf("g%d-%d.example", g, i), at) {
				// A false positive on insertion: counted below with the rest.
				continue
			}
		}
	}
	if len(s.gens) != c.Generations {
		t.Fatalf("%d generations, want %d", len(s.gens), c.Generations)
	}
	// And the one a new day starts.
	s.Observe("today.example", t0.Add(time.Duration(c.Generations)*24*time.Hour))
	for i := range c.Capacity - 2 {
		s.Observe(fmt.Sprintf("today-%d.example", i), t0.Add(time.Duration(c.Generations)*24*time.Hour))
	}
	if len(s.gens) != c.Generations+1 {
		t.Fatalf("%d generations, want %d", len(s.gens), c.Generations+1)
	}
	for g := range c.Generations {
		for i := range c.Capacity - 1 {
			if !s.Known(fmt.Sprintf("g%d-%d.example", g, i)) {
				t.Fatalf("g%d-%d.example asked for within the horizon is not known", g, i)
			}
		}
	}
	fp := 0
	const probes = 200000
	for i := range probes {
		if s.Known(fmt.Sprintf("never-%d.test", i)) {
			fp++
		}
	}
	if rate := float64(fp) / probes; rate > c.FalsePositive {
		t.Errorf("false-positive rate %.4f over %d domains never asked, want at most %g", rate, probes, c.FalsePositive)
	}
	t.Logf("false positives: %d of %d (%.4f, stated %g), state %d bytes", fp, probes, float64(fp)/probes, c.FalsePositive, c.StateBytes())
}

// TestForgetsPastTheHorizon: a domain not asked for in a horizon and a
// generation's span is new again; one asked again is remembered a
// horizon from then.
func TestForgetsPastTheHorizon(t *testing.T) {
	s := New(small()) // 4 days in 4 generations
	if !s.Observe("a.example", t0) || !s.Observe("b.example", t0) {
		t.Fatal("the first domains are not new")
	}
	if s.Observe("a.example", t0.Add(2*24*time.Hour)) {
		t.Fatal("a.example forgotten after 2 days")
	}
	if !s.Known("b.example") {
		t.Fatal("b.example forgotten within the horizon")
	}
	at := t0.Add(5*24*time.Hour + time.Hour)
	if !s.Observe("b.example", at) {
		t.Error("b.example is remembered past the horizon")
	}
	if s.Observe("a.example", at) {
		t.Error("a.example, asked 2 days ago, is forgotten")
	}
	if want := t0.Add(2 * 24 * time.Hour); !s.Since().Equal(want) {
		t.Errorf("remembers since %s, want %s (a.example's generation)", s.Since(), want)
	}
	// A site silent for longer than the horizon starts afresh.
	if !s.Observe("a.example", at.Add(30*24*time.Hour)) || len(s.gens) != 1 {
		t.Errorf("after a month of silence: %d generations", len(s.gens))
	}
}

// TestFullGenerationsRotateEarly: more domains than a generation holds
// start the next one early, so the rate holds and Since says how far
// back the memory goes.
func TestFullGenerationsRotateEarly(t *testing.T) {
	c := small()
	c.Capacity = 100
	s := New(c)
	for i := range 1000 {
		s.Observe(fmt.Sprintf("d%d.example", i), t0.Add(time.Duration(i)*time.Second))
	}
	if len(s.gens) != c.Generations+1 {
		t.Fatalf("%d generations", len(s.gens))
	}
	for _, g := range s.gens[:len(s.gens)-1] {
		if g.n != uint64(c.Capacity) {
			t.Errorf("a generation of %d domains, want %d", g.n, c.Capacity)
		}
	}
	// Five generations of 100 domains, a domain a second: about 500 s
	// back (a domain taken as known by chance takes no room).
	if since := s.Since(); since.Before(t0.Add(450*time.Second)) || since.After(t0.Add(550*time.Second)) {
		t.Errorf("since %s, want about %s", since, t0.Add(500*time.Second))
	}
}

// TestStateRoundTrip: a state read back answers as the Seen it was
// written from; a state of other arguments, or cut short, or garbage,
// is refused saying why.
func TestStateRoundTrip(t *testing.T) {
	c := small()
	s := New(c)
	for i := range 500 {
		s.Observe(fmt.Sprintf("d%d.example", i), t0.Add(time.Duration(i)*time.Hour/10))
	}
	state, _ := s.MarshalBinary()
	r, err := Load(c, state)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := r.MarshalBinary()
	if string(again) != string(state) {
		t.Fatal("the state read back writes differently")
	}
	if r.Observe("d42.example", t0.Add(time.Hour*60)) || !r.Observe("fresh.example", t0.Add(time.Hour*60)) {
		t.Error("the state read back answers differently")
	}
	other := c
	other.Capacity++
	if _, err := Load(other, state); !errors.Is(err, ErrOtherConfig) {
		t.Errorf("other arguments: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("PND1"), state[:len(state)-1], append([]byte("XXXX"), state[4:]...)} {
		if _, err := Load(c, bad); err == nil {
			t.Errorf("a state of %d bytes read", len(bad))
		}
	}
	if err := (Config{Horizon: 30 * 24 * time.Hour, Generations: 4, Capacity: MaxCapacity, FalsePositive: MinFP}).Validate(64 << 20); err == nil {
		t.Error("a config over the carry bound is accepted")
	}
}

// FuzzLoad: whatever bytes a state holds, Load refuses them or returns
// a Seen that works.
func FuzzLoad(f *testing.F) {
	c := Config{Horizon: 2 * time.Hour, Generations: 2, Capacity: 10, FalsePositive: 0.1}
	s := New(c)
	s.Observe("a.example", t0)
	state, _ := s.MarshalBinary()
	f.Add(state)
	f.Add([]byte("PND1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Load(c, b)
		if err != nil {
			return
		}
		r.Observe("b.example", t0.Add(time.Hour))
		if _, err := r.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestProbesAreFNV1a: the first probe is FNV-1a as hash/fnv computes
// it, so a state written by any build reads in another.
func TestProbesAreFNV1a(t *testing.T) {
	for _, d := range []string{"", "example.com", "xn--bcher-kva.example", "A.B.C"} {
		f := fnv.New64a()
		f.Write([]byte(d))
		if h1, _ := probes(d); h1 != f.Sum64() {
			t.Errorf("%q: %x, FNV-1a %x", d, h1, f.Sum64())
		}
	}
}
