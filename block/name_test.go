package block

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Name
	}{
		{"20250505-151105-01789592.lax.pcap.sz", Name{Time: time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC), Seq: 1789592, Instance: "lax", Queue: "pcap.sz"}},
		{"20250505-151105-00000001-eth0.ams-1.dns.arrow", Name{Time: time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC), Seq: 1, Info: "eth0", Instance: "ams-1", Queue: "dns.arrow"}},
		{"19700101-000000-18446744073709551615.a.b", Name{Time: time.Unix(0, 0).UTC(), Seq: 1<<64 - 1, Instance: "a", Queue: "b"}},
		{"20250505-151105-00000007-a-b.x.q", Name{Time: time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC), Seq: 7, Info: "a-b", Instance: "x", Queue: "q"}},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !got.Time.Equal(tc.want.Time) || got.Seq != tc.want.Seq || got.Info != tc.want.Info || got.Instance != tc.want.Instance || got.Queue != tc.want.Queue {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("Parse(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "does not start"},
		{"../x", "not allowed"},
		{"20250505-151105-00000001.lax/../../etc.pcap", "not allowed"},
		{"/etc/passwd", "not allowed"},
		{"20250505-151105-00000001.lax.pcap\x00.sz", "not allowed"},
		{"20250505-151105-00000001.lax..pcap", `".."`},
		{"20250505-151105-00000001.lax.pcap.", "empty part"},
		{"20250505-151105-00000001.lax", "no queue"},
		{"20250505-151105-00000001", "no instance"},
		{"20251305-151105-00000001.lax.pcap", "bad event time"},
		{"20250505-151105-x.lax.pcap", "sequence number"},
		{"20250505-151105-99999999999999999999.lax.pcap", "does not fit"},
		{"20250505-151105-00000001-.lax.pcap", "empty info"},
		{"20250505-151105-00000001." + strings.Repeat("a", 65) + ".pcap", "longer than 64"},
		{"20250505-151105-00000001.lax." + strings.Repeat("q", 250), "longer than 255"},
		{"20250505-151105-00000001.la x.pcap", "not allowed"},
		{"20250505-151105-00000001.lax.pcap%2F..", "not allowed"},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want error containing %q", tc.in, tc.why)
			continue
		}
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("Parse(%q) error %v is not ErrInvalidName", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Parse(%q) = %v, want it to say %q", tc.in, err, tc.why)
		}
	}
}

func TestValidateQueue(t *testing.T) {
	for _, ok := range []string{"pcap", "pcap.sz", "dns.arrow", "rssac.yaml", "pcap.h0"} {
		if err := ValidateQueue(ok); err != nil {
			t.Errorf("ValidateQueue(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a..b", ".a", "a.", "a/b", `a\b`, "a b", strings.Repeat("q", 129)} {
		if err := ValidateQueue(bad); err == nil {
			t.Errorf("ValidateQueue(%q) succeeded", bad)
		}
	}
}

// FuzzParse checks that Parse never panics, that whatever it accepts is made
// only of safe characters, and that formatting a parsed name and parsing it
// again gives the same identity.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"20250505-151105-01789592.lax.pcap.sz",
		"20250505-151105-00000001-eth0.ams-1.dns.arrow",
		"../x", "20250505-151105-1.a..b", "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if strings.ContainsAny(s, "/\\\x00") || strings.Contains(s, "..") {
			t.Fatalf("Parse accepted unsafe name %q", s)
		}
		again, err := Parse(n.String())
		if err != nil {
			t.Fatalf("Parse(%q) ok but its canonical form %q fails: %v", s, n.String(), err)
		}
		if again.ID() != n.ID() || !again.Time.Equal(n.Time) || again.Info != n.Info {
			t.Fatalf("round trip of %q changed it: %+v vs %+v", s, n, again)
		}
	})
}

// TestSampleRate: a block sampled at one flow in N says so in its name
// and reads back N; any other info reads as not sampled.
func TestSampleRate(t *testing.T) {
	n, err := Parse("20261207-100000-00000001-" + SampleInfo(100) + ".lax.pcap.sz")
	if err != nil || n.SampleRate() != 100 {
		t.Fatalf("%v %v: rate %d", n, err, n.SampleRate())
	}
	for _, info := range []string{"", "s", "s0", "s01", "x100", "s1x", "s99999999", "s16777217", "s-1"} {
		if r := (Name{Info: info}).SampleRate(); r != 1 {
			t.Errorf("info %q reads as rate %d", info, r)
		}
	}
	if SampleInfo(1) != "" || (Name{Info: SampleInfo(MaxSampleRate)}).SampleRate() != MaxSampleRate {
		t.Error("rates 1 and MaxSampleRate do not round-trip")
	}
}
