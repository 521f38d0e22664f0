package dnsrec

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/synth"
)

// TestGeneratedAgreesWithTshark runs tshark itself over generated
// captures (UDP and TCP, IPv4 and IPv6, EDNS; then the attack mix with
// floods, fragments, reordered and retransmitted TCP, malformed queries)
// and compares every message.
func TestGeneratedAgreesWithTshark(t *testing.T) {
	attack := synth.Config{Seed: 10, Duration: 3 * time.Second, TCP: 0.3, IPv6: 0.4, EDNS: 0.7}
	synth.AttackMix(&attack)
	signed := synth.Config{Seed: 12, Duration: 3 * time.Second, TCP: 0.3, IPv6: 0.4}
	synth.SignedMix(&signed)
	for name, cfg := range map[string]synth.Config{
		"normal": {Seed: 9, Duration: 3 * time.Second, TCP: 0.3, IPv6: 0.4, EDNS: 0.7},
		"attack": attack,
		"signed": signed,
	} {
		t.Run(name, func(t *testing.T) { agreeWithTshark(t, cfg) })
	}
}

func agreeWithTshark(t *testing.T, cfg synth.Config) {
	tshark := testenv.Tool(t, "tshark")
	var b bytes.Buffer
	w, _ := pcap.NewWriter(&b, layers.LinkTypeEthernet, 65535, false)
	st, err := synth.Generate(context.Background(), w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Flush()
	path := filepath.Join(t.TempDir(), "gen.pcap")
	os.WriteFile(path, b.Bytes(), 0o644)

	// tshark reassembles out-of-order TCP segments only when asked; by
	// default it loses the messages of reordered streams (430 of the
	// attack mix's), which Plumb finds.
	out, err := testenv.Command(t, 5*time.Minute, tshark, "-r", path, "-n", "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", "dns",
		"-T", "fields", "-e", "frame.time_epoch", "-e", "ip.proto", "-e", "ipv6.nxt", "-e", "dns.id", "-e", "dns.flags.response",
		"-e", "dns.flags.rcode", "-e", "dns.qry.name").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var want []row
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		at0 := f[0]
		f = f[1:]
		tr := "udp"
		if f[0] == "6" || f[1] == "6" {
			tr = "tcp"
		}
		// A frame that completes several TCP messages lists each field's
		// values separated by commas.
		ids, qrs, rcodes, names := strings.Split(f[2], ","), strings.Split(f[3], ","), strings.Split(f[4], ","), strings.Split(f[5], ",")
		at := func(vs []string, i int) string { // queries have no rcode field
			if i < len(vs) {
				return vs[i]
			}
			return ""
		}
		for i := range ids {
			id, _ := strconv.ParseUint(strings.TrimPrefix(ids[i], "0x"), 16, 16)
			rc, _ := strconv.ParseUint(at(rcodes, i), 10, 16)
			qr := at(qrs, i) == "1" || at(qrs, i) == "True"
			want = append(want, row{tr, uint16(id), qr, normName(at(names, i)), uint16(rc), at0})
		}
	}
	got, partial, xs := extract(t, path)
	if len(partial) > 0 {
		t.Errorf("%d partial messages in a capture whose every datagram is whole: %v", len(partial), head(partial))
	}
	missing, extra := diff(got, want)
	if len(missing)+len(extra) > 0 || int64(len(got)) != st.Messages {
		t.Fatalf("generated %d messages (%d TCP); Plumb %d (%d TCP), tshark %d; missing %d %v; extra %d %v",
			st.Messages, st.TCP, len(got), xs.TCP, len(want), len(missing), head(missing), len(extra), head(extra))
	}
	if xs.TCP != st.TCP || xs.Malformed != st.Malformed {
		t.Errorf("stats %+v; generated %d over TCP", xs, st.TCP)
	}
	t.Logf("%d messages (%d over TCP) agree with tshark", len(got), xs.TCP)
}

func head[T any](rs []T) []T { return rs[:min(len(rs), 5)] }
