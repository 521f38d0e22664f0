package engine

import (
	"testing"
	"time"
)

// TestFiredLogSummarises: of windows fired in a burst, one line every
// firedLogEvery is written at Info, carrying how many fired quietly since
// the last; the first of a quiet stage always gets one.
func TestFiredLogSummarises(t *testing.T) {
	var l firedLog
	t0 := time.Unix(1000, 0)
	infos, quietTotal := 0, 0
	for i := range 1000 { // a window every 50 ms for 50 s
		if info, quiet := l.note(t0.Add(time.Duration(i) * 50 * time.Millisecond)); info {
			infos++
			quietTotal += quiet
		}
	}
	if infos != 5 {
		t.Errorf("%d lines at Info for 1,000 windows over 50 s; want one every 10 s: 5", infos)
	}
	if infos+quietTotal+l.quiet != 1000 {
		t.Errorf("lines %d + counted quietly %d + not yet told %d; want all 1,000 windows", infos, quietTotal, l.quiet)
	}
	pending := l.quiet
	if info, quiet := l.note(t0.Add(time.Hour)); !info || pending == 0 || quiet != pending {
		t.Errorf("a window an hour later: info %v, telling %d; want a line telling the %d fired quietly before", info, quiet, pending)
	}
}
