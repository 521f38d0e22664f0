package synth

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/pcap"
)

func generate(t *testing.T, cfg Config) ([]byte, Stats) {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, layers.LinkTypeEthernet, 65535, false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Generate(context.Background(), w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), st
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Seed: 7, Duration: 2 * time.Second, TCP: 0.1, IPv6: 0.3, EDNS: 0.5}
	a, st := generate(t, cfg)
	b, _ := generate(t, cfg)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different captures")
	}
	cfg.Seed = 8
	if c, _ := generate(t, cfg); bytes.Equal(a, c) {
		t.Fatal("another seed gave the same capture")
	}
	if st.Queries < 3000 || st.TCP == 0 || st.UDP == 0 || int64(len(a)) != st.Bytes {
		t.Fatalf("stats %+v for %d bytes", st, len(a))
	}
	if _, st := generate(t, Config{Seed: 1, MaxBytes: 1 << 20}); st.Bytes < 1<<20 || st.Bytes > 1<<20+4096 {
		t.Fatalf("MaxBytes 1 MiB gave %d bytes", st.Bytes)
	}
}

// TestTsharkAgrees: an independent decoder finds every generated DNS
// message, over UDP and reassembled TCP, and nothing malformed.
func TestTsharkAgrees(t *testing.T) {
	tshark := testenv.Tool(t, "tshark")
	data, st := generate(t, Config{Seed: 3, Duration: 3 * time.Second, TCP: 0.2, IPv6: 0.4, EDNS: 0.7})
	path := filepath.Join(t.TempDir(), "synth.pcap")
	os.WriteFile(path, data, 0o644)
	out, err := testenv.Command(t, 5*time.Minute, tshark, "-r", path, "-n", "-o", "tcp.desegment_tcp_streams:TRUE",
		"-Y", "dns", "-T", "fields", "-e", "ip.proto", "-e", "ipv6.nxt", "-e", "dns.flags.response", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var msgs, tcp, responses, malformed int64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		msgs++
		if f[0] == "6" || f[1] == "6" {
			tcp++
		}
		if strings.Contains(f[2], "1") || strings.Contains(f[2], "True") {
			responses++
		}
		if len(f) > 3 && f[3] != "" {
			malformed++
		}
	}
	if msgs != st.Messages || tcp != st.TCP || responses != st.Messages-st.Queries || malformed != 0 {
		t.Fatalf("tshark: %d messages (%d TCP, %d responses, %d malformed); generated %d (%d TCP, %d responses)",
			msgs, tcp, responses, malformed, st.Messages, st.TCP, st.Messages-st.Queries)
	}
}

// TestTimeOrder: a generated capture is in time order, as one from
// tcpdump is (issue 23: 161,894 of 485,560 packets went back in time,
// responses written before the queries of later exchanges).
func TestTimeOrder(t *testing.T) {
	for _, mix := range []string{"normal", "attack"} {
		cfg := Config{Seed: 3, Duration: 3 * time.Second, TCP: 0.2, IPv6: 0.3}
		if mix == "attack" {
			AttackMix(&cfg)
		}
		data, st := generate(t, cfg)
		rd, closer, err := pcap.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		var last time.Time
		back := 0
		n := 0
		for {
			_, ci, err := rd.Next()
			if err != nil {
				break
			}
			n++
			if ci.Timestamp.Before(last) {
				back++
			}
			last = ci.Timestamp
		}
		closer.Close()
		if back > 0 || n != int(st.Packets) {
			t.Errorf("mix %q: %d of %d packets go back in time (%d made)", mix, back, n, st.Packets)
		}
	}
}

// TestCapinfosStrictTimeOrder: Wireshark's capinfos, an independent
// reader, finds generated captures of both mixes in strict time order.
func TestCapinfosStrictTimeOrder(t *testing.T) {
	capinfos := testenv.Tool(t, "capinfos")
	for _, mix := range []string{"normal", "attack"} {
		cfg := Config{Seed: 7, Duration: 3 * time.Second, TCP: 0.2, IPv6: 0.3}
		if mix == "attack" {
			AttackMix(&cfg)
		}
		data, _ := generate(t, cfg)
		file := filepath.Join(t.TempDir(), mix+".pcap")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(capinfos, "-o", file).CombinedOutput()
		if err != nil {
			t.Fatalf("capinfos -o %s: %v\n%s", file, err, out)
		}
		if !regexp.MustCompile(`(?m)^Strict time order:\s+True$`).Match(out) {
			t.Errorf("mix %q: capinfos says\n%s", mix, out)
		}
	}
}

// TestSignedMix: tshark, reading a capture of the signed mix, finds what
// a signed zone's server sends: most responses with answers and their
// RRSIG, DNSSEC asked for (DO), the zone's keys, long TXT strings.
func TestSignedMix(t *testing.T) {
	tshark := testenv.Tool(t, "tshark")
	cfg := Config{Seed: 5, Duration: 3 * time.Second, TCP: 0.1, IPv6: 0.3}
	SignedMix(&cfg)
	data, _ := generate(t, cfg)
	file := filepath.Join(t.TempDir(), "signed.pcap")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	count := func(filter string) int {
		out, err := exec.Command(tshark, "-n", "-r", file, "-Y", filter).Output()
		if err != nil {
			t.Fatalf("tshark -Y %s: %v", filter, err)
		}
		return bytes.Count(out, []byte("\n"))
	}
	responses := count("dns.flags.response == 1")
	signed := count("dns.flags.response == 1 && dns.resp.type == 46")
	do := count("dns.flags.response == 0 && dns.rr.udp_payload_size && dns.resp.z.do == 1")
	keys := count("dns.resp.type == 48")
	long := count("dns.txt.length > 200")
	t.Logf("%d responses: %d signed; %d queries with DO; %d with keys; %d with a long TXT", responses, signed, do, keys, long)
	if responses == 0 || signed < responses/2 || do < responses/2 || keys == 0 || long == 0 {
		t.Errorf("the signed mix does not look signed: %d responses, %d signed, %d queries with DO, %d keys, %d long TXT",
			responses, signed, do, keys, long)
	}
}
