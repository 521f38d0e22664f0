package dnsrec

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/dns/dnsmsg"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// sectionFields are what TestSectionsAgreeWithTshark compares, frame by
// frame: tshark's field, and how to make the same text from Plumb's
// records of the messages completed in that frame.
var sectionFields = []struct {
	field string
	ours  func(m *dnsmsg.Message) []string
}{
	{"dns.a", rdataOf(dnsmsg.TypeA)},
	{"dns.aaaa", rdataOf(dnsmsg.TypeAAAA)},
	{"dns.cname", rdataOf(dnsmsg.TypeCNAME)},
	{"dns.ns", rdataOf(dnsmsg.TypeNS)},
	{"dns.ptr.domain_name", rdataOf(dnsmsg.TypePTR)},
	{"dns.mx.mail_exchange", func(m *dnsmsg.Message) []string {
		var out []string
		for _, rr := range records(m) {
			if rr.Type == dnsmsg.TypeMX {
				_, name, _ := strings.Cut(rr.RData, " ")
				out = append(out, strings.TrimSuffix(name, "."))
			}
		}
		return out
	}},
	{"dns.soa.mname", func(m *dnsmsg.Message) []string {
		var out []string
		for _, rr := range records(m) {
			if rr.Type == dnsmsg.TypeSOA {
				out = append(out, strings.TrimSuffix(strings.Fields(rr.RData)[0], "."))
			}
		}
		return out
	}},
	{"dns.nsec.next_domain_name", field(dnsmsg.TypeNSEC, 0, strings.ToLower)},
	{"dns.nsec3.iterations", field(dnsmsg.TypeNSEC3, 2, nil)},
	{"dns.nsec3.hash_value", field(dnsmsg.TypeNSEC3, 4, strings.ToLower)},
	{"dns.resp.ttl", func(m *dnsmsg.Message) []string {
		var out []string
		for _, rr := range records(m) {
			out = append(out, strconv.FormatUint(uint64(rr.TTL), 10))
		}
		return out
	}},
	{"dns.opt.client.netmask", func(m *dnsmsg.Message) []string {
		if m.ECS.Family == 0 {
			return nil
		}
		return []string{strconv.Itoa(int(m.ECS.SourcePrefix))}
	}},
	{"dns.opt.client.addr4", func(m *dnsmsg.Message) []string {
		if m.ECS.Family != 1 {
			return nil
		}
		return []string{m.ECS.Address}
	}},
	{"dns.opt.ext_error.info_code", func(m *dnsmsg.Message) []string {
		var out []string
		for _, e := range m.EDE {
			out = append(out, strconv.Itoa(int(e.Code)))
		}
		return out
	}},
}

func records(m *dnsmsg.Message) []dnsmsg.RR {
	return append(append(append([]dnsmsg.RR(nil), m.Answer...), m.Authority...), m.Additional...)
}

func rdataOf(typ uint16) func(m *dnsmsg.Message) []string {
	return func(m *dnsmsg.Message) []string {
		var out []string
		for _, rr := range records(m) {
			if rr.Type == typ {
				out = append(out, strings.TrimSuffix(rr.RData, "."))
			}
		}
		return out
	}
}

// field is the i-th field of the data of each record of type typ,
// without a final dot, as norm (if any) makes it.
func field(typ uint16, i int, norm func(string) string) func(m *dnsmsg.Message) []string {
	return func(m *dnsmsg.Message) []string {
		var out []string
		for _, rr := range records(m) {
			if f := strings.Fields(rr.RData); rr.Type == typ && i < len(f) {
				v := strings.TrimSuffix(f[i], ".")
				if norm != nil {
					v = norm(v)
				}
				out = append(out, v)
			}
		}
		return out
	}
}

// TestSectionsAgreeWithTshark: on every capture in testdata, the answer,
// authority and additional records (A, AAAA, CNAME, NS, PTR, MX, SOA and
// every TTL, NSEC's next name, NSEC3's iterations and next hashed owner),
// the client subnet and the extended errors Plumb reads equal
// tshark's, frame by frame.
func TestSectionsAgreeWithTshark(t *testing.T) {
	tshark := testenv.Tool(t, "tshark")
	captures, _ := filepath.Glob("../../testdata/pcaps/*.pcap*")
	sort.Strings(captures)
	args := []string{"-n", "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tcp.reassemble_out_of_order:TRUE",
		"-o", "ip.defragment:TRUE", "-o", "ipv6.defragment:TRUE", "-Y", "dns && (udp.port == 53 || tcp.port == 53)",
		"-T", "fields", "-E", "separator=/t", "-E", "aggregator=,", "-e", "frame.time_epoch"}
	for _, f := range sectionFields {
		args = append(args, "-e", f.field)
	}
	compared := map[string]int{}
	for _, c := range captures {
		out, err := testenv.Command(t, 2*time.Minute, tshark, append([]string{"-r", c}, args...)...).Output()
		if err != nil {
			t.Fatalf("tshark -r %s: %v", c, err)
		}
		want := map[string][]string{} // frame time → the fields' values
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			if line == "" {
				continue
			}
			v := strings.Split(line, "\t")
			want[v[0]] = v[1:]
		}
		got := map[string][][]string{}
		for _, m := range messages(t, c) {
			vals := got[m.time]
			if vals == nil {
				vals = make([][]string, len(sectionFields))
			}
			for i, f := range sectionFields {
				vals[i] = append(vals[i], f.ours(&m.msg)...)
			}
			got[m.time] = vals
		}
		for ts, vals := range got {
			w, ok := want[ts]
			if !ok {
				continue // a message tshark does not place in this frame: TestAgreesWithTshark covers which
			}
			for i, f := range sectionFields {
				if g := strings.Join(vals[i], ","); g != w[i] {
					t.Errorf("%s frame at %s: %s = %q, tshark %q", filepath.Base(c), ts, f.field, g, w[i])
				} else if g != "" {
					compared[f.field]++
				}
			}
		}
	}
	t.Logf("frames agreeing on a non-empty field: %v", compared)
	for _, f := range []string{"dns.a", "dns.aaaa", "dns.cname", "dns.ns", "dns.soa.mname", "dns.resp.ttl", "dns.opt.client.addr4",
		"dns.nsec.next_domain_name", "dns.nsec3.hash_value"} {
		if compared[f] == 0 {
			t.Errorf("no frame compared %s", f)
		}
	}
}

type timedMsg struct {
	time string
	msg  dnsmsg.Message
}

// messages extracts a capture's messages with the time of their frame, as
// tshark prints frame.time_epoch.
func messages(t *testing.T, capture string) []timedMsg {
	var out []timedMsg
	eachRecord(t, capture, func(rec *Record) { out = append(out, timedMsg{frameTime(rec), rec.Msg}) })
	return out
}
