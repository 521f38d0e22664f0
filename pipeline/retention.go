package pipeline

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limits are what a retention lets a queue keep: blocks younger than
// MaxAge (0: any age) and, of those, the newest up to MaxBytes in all
// (0: any size). Neither set means until consumed or forever.
type Limits struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// Limits parses a retention: "" (until consumed), "forever", a duration
// ("30d", "12h"), a size ("10GiB"), or a duration and a size
// ("30d,500GiB": whichever lets go first).
func (r Retention) Limits() (Limits, error) {
	var l Limits
	if r == UntilConsumed || r == Forever {
		return l, nil
	}
	for part := range strings.SplitSeq(string(r), ",") {
		part = strings.TrimSpace(part)
		if d, err := ParseDuration(part); err == nil && l.MaxAge == 0 && d > 0 {
			l.MaxAge = time.Duration(d)
			continue
		}
		if n, err := ParseSize(part); err == nil && l.MaxBytes == 0 && n > 0 {
			l.MaxBytes = n
			continue
		}
		return l, fmt.Errorf("retention %q: want forever, a duration such as 30d, a size such as 500GiB, or both as 30d,500GiB", string(r))
	}
	return l, nil
}

// ParseSize reads 1048576, 64KiB, 256MiB, 1GiB, 2TiB (also K, M, G, T,
// KB, MB, GB, TB as powers of 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional KiB, MiB, GiB or TiB", s)
	}
	return n * mult, nil
}
