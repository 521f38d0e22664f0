package newdomains

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Config sizes a Seen.
type Config struct {
	// Horizon is how long a domain is remembered after it was last
	// asked for (event time).
	Horizon time.Duration
	// Generations splits the horizon: a domain is forgotten between
	// Horizon and Horizon·(1+1/Generations) after it was last asked, in
	// one step per Horizon/Generations.
	Generations int
	// Capacity is how many domains one generation holds at the stated
	// rate; a generation that reaches it starts the next early (the
	// horizon shortens, Seen.Since says from when).
	Capacity int
	// FalsePositive is the chance that a domain never asked for is taken
	// as known (and so not reported new), with every generation full.
	FalsePositive float64
}

// Bounds of a Config.
const (
	MinHorizon     = time.Hour
	MaxHorizon     = 400 * 24 * time.Hour
	MaxGenerations = 16
	MaxCapacity    = 20_000_000
	MinFP, MaxFP   = 1e-6, 0.1
)

// Validate checks c against the bounds and that its state fits in
// maxBytes.
func (c Config) Validate(maxBytes int) error {
	switch {
	case c.Horizon < MinHorizon || c.Horizon > MaxHorizon:
		return fmt.Errorf("horizon %s: want %s to %s", c.Horizon, MinHorizon, MaxHorizon)
	case c.Generations < 2 || c.Generations > MaxGenerations:
		return fmt.Errorf("generations %d: want 2 to %d", c.Generations, MaxGenerations)
	case c.Capacity < 1 || c.Capacity > MaxCapacity:
		return fmt.Errorf("capacity %d: want 1 to %d", c.Capacity, MaxCapacity)
	case !(c.FalsePositive >= MinFP && c.FalsePositive <= MaxFP):
		return fmt.Errorf("false-positive rate %g: want %g to %g", c.FalsePositive, MinFP, MaxFP)
	}
	if n := c.StateBytes(); n > maxBytes {
		return fmt.Errorf("%d generations of %d domains at a false-positive rate of %g take %d bytes, over the %d a stage may carry per site; lower the capacity or raise the rate",
			c.Generations, c.Capacity, c.FalsePositive, n, maxBytes)
	}
	return nil
}

// kept is how many generations a Seen holds at most: those of the
// horizon, and the one it is starting.
func (c Config) kept() int { return c.Generations + 1 }

// shape is the bits and hashes of one generation: each holds Capacity
// domains at a share of FalsePositive, so all of them together stay
// within it (a union bound, with a fifth to spare for the rounding of
// bits and hashes).
func (c Config) shape() (words uint64, k int) {
	p := c.FalsePositive / float64(c.kept()) / 1.25
	bits := math.Ceil(-float64(c.Capacity) * math.Log(p) / (math.Ln2 * math.Ln2))
	words = uint64(math.Ceil(bits / 64))
	k = max(1, int(math.Round(float64(words*64)/float64(c.Capacity)*math.Ln2)))
	return words, min(k, 32)
}

// StateBytes is the size of a full Seen's state.
func (c Config) StateBytes() int {
	words, _ := c.shape()
	return headerLen + c.kept()*(genHeaderLen+int(words)*8)
}

// Seen is a rotating Bloom filter of the domains asked for over a
// horizon. It never forgets a domain asked within the horizon (no false
// negatives) unless more than Capacity domains came in a generation's
// span (see Since), and takes a domain never asked for as known with at
// most the configured chance.
type Seen struct {
	cfg   Config
	words uint64
	k     int
	gens  []generation // oldest first; the last takes new domains
}

type generation struct {
	start int64 // Unix seconds of its first domain's event time
	n     uint64
	bits  []uint64
}

// New returns an empty Seen.
func New(c Config) *Seen {
	s := &Seen{cfg: c}
	s.words, s.k = c.shape()
	return s
}

// probes returns the two hashes the k bit positions derive from
// (Kirsch and Mitzenmacher: g_i = h1 + i·h2). FNV-1a is fixed by its
// specification, so a state written by one process reads in another.
func probes(domain string) (h1, h2 uint64) {
	h1 = 14695981039346656037 // FNV-1a, over the string in place: no allocation a row
	for i := 0; i < len(domain); i++ {
		h1 = (h1 ^ uint64(domain[i])) * 1099511628211
	}
	// A second, independent hash: SplitMix64's finalizer of the first.
	z := h1 + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	h2 = (z ^ (z >> 31)) | 1
	return h1, h2
}

func (g *generation) has(h1, h2, bits uint64, k int) bool {
	for i := range uint64(k) {
		b := (h1 + i*h2) % bits
		if g.bits[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

func (g *generation) add(h1, h2, bits uint64, k int) {
	for i := range uint64(k) {
		b := (h1 + i*h2) % bits
		g.bits[b/64] |= 1 << (b % 64)
	}
	g.n++
}

// Observe notes that domain was asked for at event time at, and reports
// whether it is new: asked for by no generation still remembered. A
// known domain is noted again in the newest generation, so it is
// remembered for a horizon from its last use.
func (s *Seen) Observe(domain string, at time.Time) bool {
	s.rotate(at)
	h1, h2 := probes(domain)
	bits := s.words * 64
	cur := &s.gens[len(s.gens)-1]
	if cur.has(h1, h2, bits, s.k) {
		return false
	}
	known := false
	for i := range s.gens[:len(s.gens)-1] {
		if s.gens[i].has(h1, h2, bits, s.k) {
			known = true
			break
		}
	}
	cur.add(h1, h2, bits, s.k)
	return !known
}

// Known reports whether domain is remembered, without noting it.
func (s *Seen) Known(domain string) bool {
	h1, h2 := probes(domain)
	for i := range s.gens {
		if s.gens[i].has(h1, h2, s.words*64, s.k) {
			return true
		}
	}
	return false
}

// rotate starts a generation when the newest is older than its share of
// the horizon or full, and lets go of those past the horizon.
func (s *Seen) rotate(at time.Time) {
	now := at.Unix()
	span := int64(s.cfg.Horizon/time.Second) / int64(s.cfg.Generations)
	if n := len(s.gens); n > 0 {
		cur := s.gens[n-1]
		if now < cur.start+span && cur.n < uint64(s.cfg.Capacity) {
			return
		}
	}
	// Reuse the oldest generation's bits when it goes.
	var bits []uint64
	if len(s.gens) >= s.cfg.kept() {
		bits = s.gens[0].bits
		clear(bits)
		s.gens = append(s.gens[:0], s.gens[1:]...)
	} else {
		bits = make([]uint64, s.words)
	}
	s.gens = append(s.gens, generation{start: now, bits: bits})
	// Generations wholly past the horizon go too (a site silent for
	// long): a generation holds the domains of at most its span from its
	// start, however late the next started.
	for len(s.gens) > 1 && min(s.gens[1].start, s.gens[0].start+span) <= now-int64(s.cfg.Horizon/time.Second) {
		s.gens = s.gens[1:]
	}
}

// Since is from when the domains remembered were asked: the start of
// the oldest generation kept. It is later than the horizon asks for
// when generations filled before their time (more domains than
// Capacity in a generation's span).
func (s *Seen) Since() time.Time {
	if len(s.gens) == 0 {
		return time.Time{}
	}
	return time.Unix(s.gens[0].start, 0).UTC()
}

// The state's layout: a header (magic, version, the Config, the number
// of generations), then each generation (start, count, bits). Its
// integers are little-endian.
const (
	magic        = "PND1"
	headerLen    = 4 + 8 + 4 + 8 + 8 + 4
	genHeaderLen = 8 + 8
)

// MarshalBinary returns the state of s.
func (s *Seen) MarshalBinary() ([]byte, error) {
	out := make([]byte, 0, headerLen+len(s.gens)*(genHeaderLen+int(s.words)*8))
	out = append(out, magic...)
	out = binary.LittleEndian.AppendUint64(out, uint64(s.cfg.Horizon))
	out = binary.LittleEndian.AppendUint32(out, uint32(s.cfg.Generations))
	out = binary.LittleEndian.AppendUint64(out, uint64(s.cfg.Capacity))
	out = binary.LittleEndian.AppendUint64(out, math.Float64bits(s.cfg.FalsePositive))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(s.gens)))
	for _, g := range s.gens {
		out = binary.LittleEndian.AppendUint64(out, uint64(g.start))
		out = binary.LittleEndian.AppendUint64(out, g.n)
		for _, w := range g.bits {
			out = binary.LittleEndian.AppendUint64(out, w)
		}
	}
	return out, nil
}

// ErrOtherConfig is returned by Load for a state made with another
// Config (the stage's arguments changed): it cannot be read as this one.
var ErrOtherConfig = errors.New("the state was made with other arguments")

// Load reads a state MarshalBinary wrote for the same Config.
func Load(c Config, state []byte) (*Seen, error) {
	s := New(c)
	if len(state) < headerLen || string(state[:4]) != magic {
		return nil, errors.New("not a newdomains state")
	}
	le := binary.LittleEndian
	got := Config{
		Horizon:       time.Duration(le.Uint64(state[4:])),
		Generations:   int(le.Uint32(state[12:])),
		Capacity:      int(le.Uint64(state[16:])),
		FalsePositive: math.Float64frombits(le.Uint64(state[24:])),
	}
	if got != c {
		return nil, fmt.Errorf("%w (%+v, not %+v)", ErrOtherConfig, got, c)
	}
	n := int(le.Uint32(state[32:]))
	rest := state[headerLen:]
	size := genHeaderLen + int(s.words)*8
	if n < 0 || n > c.kept() || len(rest) != n*size {
		return nil, fmt.Errorf("a state of %d generations in %d bytes, want %d of %d", n, len(rest), n, size)
	}
	for i := range n {
		g := rest[i*size : (i+1)*size]
		gen := generation{start: int64(le.Uint64(g)), n: le.Uint64(g[8:]), bits: make([]uint64, s.words)}
		for j := range gen.bits {
			gen.bits[j] = le.Uint64(g[genHeaderLen+8*j:])
		}
		if i > 0 && gen.start < s.gens[i-1].start {
			return nil, errors.New("a state whose generations are out of order")
		}
		s.gens = append(s.gens, gen)
	}
	return s, nil
}
