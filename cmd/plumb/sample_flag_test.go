package main

import "testing"

// TestParseSample: --sample takes 1/N with N from 1 to the largest rate
// a block name can carry; anything else is refused, naming the flag.
func TestParseSample(t *testing.T) {
	for v, want := range map[string]uint32{"": 1, "1/1": 1, "1/100": 100, "1/16777216": 16777216} {
		if got, err := parseSample(v); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"100", "2/100", "1/0", "1/-4", "1/16777217", "1/4294967296", "1/x", "1/", "/4"} {
		if _, err := parseSample(v); err == nil {
			t.Errorf("%q: accepted", v)
		}
	}
}
