// Package synth generates realistic DNS traffic captures for tests and
// benchmarks: queries and responses over UDP and TCP (several messages per
// connection, messages split across segments), IPv4 and IPv6, EDNS0, and a
// mix of names, types and rcodes. Output is deterministic per seed.
package synth

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/plumb-dev/plumb/pcap"
)

// Config describes the traffic to generate. Generation stops at Duration
// of packet time or MaxBytes of output, whichever comes first (at least
// one must be set).
type Config struct {
	Seed     uint64
	Start    time.Time
	Duration time.Duration
	MaxBytes int64
	// Rate is queries per second of packet time.
	Rate float64
	// Sources is how many client addresses send queries.
	Sources int
	// Names is how many distinct query names are drawn from.
	Names int
	// Fractions of exchanges over TCP (a connection carries 1 to 4
	// queries), over IPv6, and with EDNS0.
	TCP, IPv6, EDNS float64
	// The harder parts of real traffic, as fractions of exchanges (see
	// AttackMix): random-subdomain flood queries, TCP flood connections,
	// fragmented large responses, reordered TCP connections and malformed
	// queries.
	RandomSubdomain, TCPFlood, Fragments, Reorder, Malformed float64
	// Signed is the fraction of answers from a signed zone (SignedMix):
	// answers with RRSIGs, DNSSEC asked for, keys and large TXT.
	Signed float64
}

// Defaults fills unset fields with a root-server-like mix.
func (c *Config) Defaults() {
	if c.Start.IsZero() {
		c.Start = time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	}
	if c.Rate <= 0 {
		c.Rate = 2000
	}
	if c.Sources <= 0 {
		c.Sources = 5000
	}
	if c.Names <= 0 {
		c.Names = 20000
	}
}

// Stats counts what was generated.
type Stats struct {
	Packets   int64
	Queries   int64
	Messages  int64 // DNS messages: queries and responses
	UDP, TCP  int64 // messages by transport
	Malformed int64 // messages cut short on purpose (counted in Messages)
	Bytes     int64
}

var (
	tlds   = []string{"com", "net", "org", "de", "uk", "nl", "jp", "br", "arpa", "io", "example"}
	qtypes = []struct {
		t layers.DNSType
		w int
	}{{layers.DNSTypeA, 45}, {layers.DNSTypeAAAA, 25}, {layers.DNSTypeNS, 8}, {layers.DNSTypeMX, 5},
		{layers.DNSTypeTXT, 5}, {layers.DNSType(43) /* DS */, 4}, {layers.DNSTypeSOA, 4}, {layers.DNSTypePTR, 4}}
	rcodes = []struct {
		r layers.DNSResponseCode
		w int
	}{{layers.DNSResponseCodeNoErr, 70}, {layers.DNSResponseCodeNXDomain, 25}, {layers.DNSResponseCodeRefused, 3}, {layers.DNSResponseCodeServFail, 2}}
	server4 = net.IPv4(198, 41, 0, 4).To4()
	server6 = net.ParseIP("2001:503:ba3e::2:30")
	srvMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x53}
	cliMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
)

// Generate writes the traffic to w (an Ethernet pcap writer).
func Generate(ctx context.Context, w *pcap.Writer, cfg Config) (Stats, error) {
	cfg.Defaults()
	if cfg.Duration <= 0 && cfg.MaxBytes <= 0 {
		return Stats{}, fmt.Errorf("synth: set a duration or a size")
	}
	g := &gen{cfg: cfg, w: w, r: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), buf: gopacket.NewSerializeBuffer()}
	g.names = make([]string, cfg.Names)
	for i := range g.names {
		g.names[i] = g.name()
	}
	now := cfg.Start
	end := cfg.Start.Add(cfg.Duration)
	for {
		if g.st.Queries%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return g.st, err
			}
		}
		if cfg.Duration > 0 && !now.Before(end) || cfg.MaxBytes > 0 && w.Bytes+g.held >= cfg.MaxBytes {
			break
		}
		// Every packet of this exchange and later ones is stamped at or
		// after now: what is held from before can be written in order.
		if err := g.release(now); err != nil {
			return g.st, err
		}
		if err := g.exchange(now); err != nil {
			return g.st, err
		}
		now = now.Add(time.Duration(g.r.ExpFloat64() / cfg.Rate * float64(time.Second)))
	}
	if err := g.release(time.Time{}); err != nil {
		return g.st, err
	}
	g.st.Bytes = w.Bytes
	return g.st, w.Flush()
}

// held is a packet waiting for the ones stamped before it.
type held struct {
	t    time.Time
	seq  uint64 // order of making, for equal times
	data []byte
}

type heldHeap []held

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if !h[i].t.Equal(h[j].t) {
		return h[i].t.Before(h[j].t)
	}
	return h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}

// release writes the held packets stamped up to until (all of them when
// until is zero), in time order: a capture is written as a capture
// process sees it, not response before query.
func (g *gen) release(until time.Time) error {
	for len(g.pending) > 0 && (until.IsZero() || !g.pending[0].t.After(until)) {
		p := heap.Pop(&g.pending).(held)
		g.held -= int64(len(p.data)) + pcap.RecordHeaderSize
		if err := g.w.WritePacket(gopacket.CaptureInfo{Timestamp: p.t, CaptureLength: len(p.data), Length: len(p.data)}, p.data); err != nil {
			return err
		}
	}
	return nil
}

type gen struct {
	cfg   Config
	w     *pcap.Writer
	r     *rand.Rand
	buf   gopacket.SerializeBuffer
	names []string
	st    Stats
	// pending holds made packets until every packet stamped before them
	// is made: exchanges overlap in time.
	pending heldHeap
	held    int64 // bytes pending, as written
	made    uint64
}

func (g *gen) name() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	n := 3 + g.r.IntN(12)
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[g.r.IntN(len(letters))]
	}
	name := string(b) + "." + tlds[g.r.IntN(len(tlds))]
	if g.r.IntN(3) == 0 {
		name = "www." + name
	}
	return name
}

func pick[T any](r *rand.Rand, items []T, weight func(T) int) T {
	total := 0
	for _, it := range items {
		total += weight(it)
	}
	n := r.IntN(total)
	for _, it := range items {
		if n -= weight(it); n < 0 {
			return it
		}
	}
	return items[0]
}

// endpoint is one side of an exchange.
type endpoint struct {
	ip   net.IP
	port uint16
}

func (g *gen) client(v6 bool) endpoint {
	k := g.r.IntN(g.cfg.Sources)
	port := uint16(1024 + g.r.IntN(64000))
	if v6 {
		ip := net.ParseIP("2001:db8::").To16()
		ip = append(net.IP{}, ip...)
		ip[12], ip[13], ip[14], ip[15] = byte(k>>24), byte(k>>16), byte(k>>8), byte(k)
		ip[8] = byte(k % 7) // spread over a few /64s
		return endpoint{ip, port}
	}
	return endpoint{net.IPv4(10, byte(k>>16), byte(k>>8), byte(k)).To4(), port}
}

// messages builds a query and its response.
func (g *gen) messages() (q, resp *layers.DNS) {
	id := uint16(g.r.Uint32())
	name := []byte(g.names[g.r.IntN(len(g.names))])
	qt := pick(g.r, qtypes, func(x struct {
		t layers.DNSType
		w int
	}) int {
		return x.w
	}).t
	question := layers.DNSQuestion{Name: name, Type: qt, Class: layers.DNSClassIN}
	q = &layers.DNS{ID: id, RD: g.r.IntN(4) == 0, OpCode: layers.DNSOpCodeQuery, Questions: []layers.DNSQuestion{question}}
	edns := g.r.Float64() < g.cfg.EDNS
	if edns {
		q.Additionals = []layers.DNSResourceRecord{opt(1232, g.r.IntN(2) == 0)}
	}
	rc := pick(g.r, rcodes, func(x struct {
		r layers.DNSResponseCode
		w int
	}) int {
		return x.w
	}).r
	resp = &layers.DNS{ID: id, QR: true, RD: q.RD, OpCode: q.OpCode, ResponseCode: rc, Questions: q.Questions}
	if g.cfg.Signed > 0 && g.r.Float64() < g.cfg.Signed && (rc == layers.DNSResponseCodeNoErr || rc == layers.DNSResponseCodeNXDomain) {
		if g.r.IntN(20) == 0 {
			question.Type = layers.DNSTypeDNSKEY
			q.Questions[0] = question
		}
		g.signedAnswer(q, resp)
		if edns {
			resp.Additionals = append(resp.Additionals, opt(1232, true))
		}
		return q, resp
	}
	switch {
	case rc == layers.DNSResponseCodeNXDomain || rc == layers.DNSResponseCodeNoErr && g.r.IntN(4) == 0:
		resp.AA = true
		resp.Authorities = []layers.DNSResourceRecord{{Name: []byte(tldOf(name)), Type: layers.DNSTypeSOA, Class: layers.DNSClassIN, TTL: 86400,
			SOA: layers.DNSSOA{MName: []byte("a.nic." + tldOf(name)), RName: []byte("hostmaster.nic." + tldOf(name)), Serial: 2025050500, Refresh: 1800, Retry: 900, Expire: 604800, Minimum: 86400}}}
	case rc == layers.DNSResponseCodeNoErr:
		// A referral: the TLD's name servers with glue.
		for i := range 1 + g.r.IntN(4) {
			ns := fmt.Sprintf("ns%d.nic.%s", i+1, tldOf(name))
			resp.Authorities = append(resp.Authorities, layers.DNSResourceRecord{Name: []byte(tldOf(name)), Type: layers.DNSTypeNS, Class: layers.DNSClassIN, TTL: 172800, NS: []byte(ns)})
			resp.Additionals = append(resp.Additionals, layers.DNSResourceRecord{Name: []byte(ns), Type: layers.DNSTypeA, Class: layers.DNSClassIN, TTL: 172800, IP: net.IPv4(192, 0, 2, byte(1+i)).To4()})
		}
	}
	if edns {
		resp.Additionals = append(resp.Additionals, opt(1232, false))
	}
	return q, resp
}

func opt(size uint16, do bool) layers.DNSResourceRecord {
	ttl := uint32(0)
	if do {
		ttl = 1 << 15
	}
	return layers.DNSResourceRecord{Type: layers.DNSTypeOPT, Class: layers.DNSClass(size), TTL: ttl}
}

func tldOf(name []byte) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return string(name[i+1:])
		}
	}
	return string(name)
}

func (g *gen) exchange(t time.Time) error {
	v6 := g.r.Float64() < g.cfg.IPv6
	cli := g.client(v6)
	srv := endpoint{server4, 53}
	if v6 {
		srv.ip = server6
	}
	c := &g.cfg
	if attack := c.RandomSubdomain + c.TCPFlood; attack > 0 {
		switch x := g.r.Float64(); {
		case x < c.RandomSubdomain:
			return g.randomSubdomain(t, cli, srv)
		case x < attack:
			return g.tcpFlood(t, cli, srv)
		}
	}
	if c.Malformed > 0 && g.r.Float64() < c.Malformed {
		return g.malformedQuery(t, cli, srv)
	}
	if g.r.Float64() < c.TCP {
		return g.tcpConn(t, cli, srv)
	}
	q, resp := g.messages()
	if err := g.udp(t, cli, srv, q); err != nil {
		return err
	}
	if c.Fragments > 0 && g.r.Float64() < c.Fragments {
		g.bigResponse(resp)
		return g.fragmented(t.Add(g.rtt()), srv, cli, resp)
	}
	return g.udp(t.Add(g.rtt()), srv, cli, resp)
}

func (g *gen) rtt() time.Duration {
	return time.Duration(100+g.r.IntN(5000)) * time.Microsecond
}

func (g *gen) ipLayer(src, dst endpoint, proto layers.IPProtocol) (gopacket.SerializableLayer, gopacket.NetworkLayer, layers.EthernetType) {
	if src.ip.To4() != nil {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.ip, DstIP: dst.ip, Id: uint16(g.r.Uint32())}
		return ip, ip, layers.EthernetTypeIPv4
	}
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.ip, DstIP: dst.ip}
	return ip, ip, layers.EthernetTypeIPv6
}

func (g *gen) eth(src endpoint, et layers.EthernetType) *layers.Ethernet {
	if src.port == 53 {
		return &layers.Ethernet{SrcMAC: srvMAC, DstMAC: cliMAC, EthernetType: et}
	}
	return &layers.Ethernet{SrcMAC: cliMAC, DstMAC: srvMAC, EthernetType: et}
}

func (g *gen) udp(t time.Time, src, dst endpoint, msg *layers.DNS) error {
	ipl, netl, et := g.ipLayer(src, dst, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.port), DstPort: layers.UDPPort(dst.port)}
	udp.SetNetworkLayerForChecksum(netl)
	if err := g.write(t, g.eth(src, et), ipl, udp, msg); err != nil {
		return err
	}
	g.count(msg, false)
	return nil
}

func (g *gen) count(msg *layers.DNS, tcp bool) {
	g.st.Messages++
	if !msg.QR {
		g.st.Queries++
	}
	if tcp {
		g.st.TCP++
	} else {
		g.st.UDP++
	}
}

func (g *gen) write(t time.Time, ls ...gopacket.SerializableLayer) error {
	if err := gopacket.SerializeLayers(g.buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return fmt.Errorf("synth: serialize: %w", err)
	}
	data := bytes.Clone(g.buf.Bytes())
	g.st.Packets++
	g.made++
	heap.Push(&g.pending, held{t, g.made, data})
	g.held += int64(len(data)) + pcap.RecordHeaderSize
	return nil
}
