package dnstop

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/block"
)

// A block's ranks reach the server's metrics as a tally (stage.Tally),
// added when its run commits, so a block retried is counted once. Keys
// start with TallyPrefix, then KIND|SITE|DIMENSION|WINDOW[|VALUE], where
// WINDOW is START+SECONDS in Unix seconds:
//
//	top.k|…|VALUE  a value's count     top.e|…|VALUE  its error
//	top.w|…        the dimension's total
//	top.b|…        its bound           top.n|…        how many to export
const TallyPrefix = "top."

const (
	keyCount = TallyPrefix + "k"
	keyErr   = TallyPrefix + "e"
	keyTotal = TallyPrefix + "w"
	keyBound = TallyPrefix + "b"
	keyN     = TallyPrefix + "n"
)

// Bounds of what a run tallies and what a tally may hold.
const (
	// MaxN is the largest top a stage may ask for (?n=).
	MaxN = 100
	// maxTallyKeys bounds the keys of one tally: every dimension's
	// 2·MaxN values, two keys each, and its three figures.
	maxTallyKeys = 8 * (4*MaxN + 3)
	// maxTallyCount bounds one count of a tally a worker sends.
	maxTallyCount = 1 << 50
	// maxValueLen bounds a value a tally carries: a domain name's
	// presentation length.
	maxValueLen = 253
)

// Window is a span of event time the metrics rank over.
type Window struct {
	Start time.Time
	Size  time.Duration
}

// WindowOf is the window of size that holds t (aligned on the Unix
// epoch, so UTC hours and days).
func WindowOf(t time.Time, size time.Duration) Window {
	return Window{Start: t.UTC().Truncate(size), Size: size}
}

func (w Window) String() string {
	return strconv.FormatInt(w.Start.Unix(), 10) + "+" + strconv.FormatInt(int64(w.Size/time.Second), 10)
}

func parseWindow(s string) (Window, error) {
	start, size, ok := strings.Cut(s, "+")
	a, err1 := strconv.ParseInt(start, 10, 64)
	b, err2 := strconv.ParseInt(size, 10, 64)
	if !ok || err1 != nil || err2 != nil || a < 0 || a > 253402300799 || b < 1 || b > 366*86400 {
		return Window{}, fmt.Errorf("window %q: want START+SECONDS", s)
	}
	return Window{Start: time.Unix(a, 0).UTC(), Size: time.Duration(b) * time.Second}, nil
}

// Tally adds to add what the metrics need of c's ranks for site's
// window: each dimension's top 2n values (so that merging blocks keeps
// the top n right when they differ a little), their errors, its bound
// and total, and n.
func Tally(c *Counter, site string, w Window, n int, add func(key string, v int64)) {
	for _, d := range c.Dimensions() {
		s := c.Summary(d)
		if s.Total() == 0 {
			continue
		}
		head := "|" + site + "|" + d + "|" + w.String()
		items := s.Top(2 * n)
		bound := s.Bound()
		if len(items) < s.Len() {
			// Cut short: a value left out was counted at most the
			// least kept.
			bound = items[len(items)-1].Count
		}
		for _, it := range items {
			if !validValue(it.Value) {
				// Not a label value; the rows still have it.
				continue
			}
			add(keyCount+head+"|"+it.Value, it.Count)
			if it.Err > 0 {
				add(keyErr+head+"|"+it.Value, it.Err)
			}
		}
		add(keyTotal+head, s.Total())
		if bound > 0 {
			add(keyBound+head, bound)
		}
		add(keyN+head, int64(n))
	}
}

// validValue says whether a value can be a label value of a tally:
// printable ASCII without the key's separator.
func validValue(v string) bool {
	return v != "" && len(v) <= maxValueLen && !strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r > '~' || r == '|' })
}

// tallyKey is a tally key read.
type tallyKey struct {
	kind, site, dim, value string
	window                 Window
}

func parseTallyKey(k string) (tallyKey, error) {
	f := strings.SplitN(k, "|", 5)
	if len(f) < 4 {
		return tallyKey{}, fmt.Errorf("tally %q: want KIND|SITE|DIMENSION|WINDOW", k)
	}
	tk := tallyKey{kind: f[0], site: f[1], dim: f[2]}
	switch tk.kind {
	case keyCount, keyErr:
		if len(f) != 5 || !validValue(f[4]) {
			return tallyKey{}, fmt.Errorf("tally %q: want a value a label can hold", k)
		}
		tk.value = f[4]
	case keyTotal, keyBound, keyN:
		if len(f) != 4 {
			return tallyKey{}, fmt.Errorf("tally %q: no value after the window", k)
		}
	default:
		return tallyKey{}, fmt.Errorf("tally %q: not a dnstop figure", k)
	}
	if err := block.ValidateInstance(tk.site); err != nil {
		return tallyKey{}, fmt.Errorf("tally %q: %v", k, err)
	}
	if !slices.Contains(Dimensions, tk.dim) {
		return tallyKey{}, fmt.Errorf("tally %q: dimension %q is not ranked", k, tk.dim)
	}
	w, err := parseWindow(f[3])
	if err != nil {
		return tallyKey{}, fmt.Errorf("tally %q: %v", k, err)
	}
	tk.window = w
	return tk, nil
}

// CheckTally refuses a tally of ranks no run makes: too many keys, an
// unknown kind, site, dimension or window, or a figure out of range.
func CheckTally(t map[string]int64) error {
	if len(t) > maxTallyKeys {
		return fmt.Errorf("tally: %d dnstop keys, over the %d a run makes", len(t), maxTallyKeys)
	}
	for k, v := range t {
		tk, err := parseTallyKey(k)
		if err != nil {
			return err
		}
		if v < 0 || v > maxTallyCount || (tk.kind == keyN && (v < 1 || v > MaxN)) {
			return fmt.Errorf("tally %q: %d out of range", k, v)
		}
	}
	return nil
}
