// Package dnspair pairs each DNS response with its query into one
// transaction: the query and response times, the latency, both sizes and
// the response's code, flags and answers. Queries with no response within
// a window of packet time are marked unanswered; responses whose query was
// never seen are kept as orphans.
//
// A Pairer is fed the records of a capture in the order dnsrec finds them
// and emits each transaction once it is decided. Its state can be saved
// at the end of a block and restored at the start of the next block of
// the same site, so a query at the end of one block pairs with its
// response in the next: the transactions do not depend on where the
// capture was cut.
package dnspair

import (
	"net/netip"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/dns/dnsrec"
)

// Defaults of a Pairer.
const (
	// DefaultWindow is how long, in packet time, a query waits for its
	// response: resolvers retry after 1–5 s, so a response later than
	// that answers a query its client has given up on.
	DefaultWindow = 5 * time.Second
	// RetransmitWithin is how soon a query sent again is a resend of
	// the same transaction rather than a new one (tshark's
	// dns.retransmission_timer).
	RetransmitWithin = 5 * time.Second
	// DefaultMaxPending bounds the queries waiting at once. An entry
	// holds the query's key and question (about 200 bytes with a typical
	// name), so the default bounds the waiting queries to ~50 MiB: 5 s of
	// an unanswered flood at 50,000 queries/s.
	DefaultMaxPending = 1 << 18
)

// Key is what a query and its response share: the transport, both ends
// (client is the query's source) and the DNS id.
type Key struct {
	TCP                    bool
	Client, Server         netip.Addr
	ClientPort, ServerPort uint16
	ID                     uint16
}

// Query is what a transaction keeps of its query.
type Query struct {
	Time        time.Time
	Size        int
	IPVersion   uint8
	Opcode      uint8
	RD, CD      bool
	EDNS, DO    bool
	UDPSize     uint16
	HasQuestion bool
	QName       string // lower-cased, as dnsmsg reads it
	QType       uint16
	QClass      uint16
	// TCPRTT is the client's TCP handshake round trip (dnsrec's
	// tcp_rtt of the query), when HasTCPRTT.
	TCPRTT    time.Duration
	HasTCPRTT bool
}

// Txn is one transaction. Exactly one of these holds: Query and Response
// are both set (answered); only Query is set (unanswered, Retransmission
// or Evicted); only Response is set (an orphan response).
type Txn struct {
	Key      Key
	Query    *Query
	Response *dnsrec.Record // valid during the emit call only
	// Evicted marks a query given up before its window ended because
	// MaxPending queries were waiting: it may yet have had a response,
	// which then shows as an orphan.
	Evicted bool
	// Retransmission marks a query sent again within RetransmitWithin of
	// the same query (key and question) still waiting: the response
	// answers the first send, as tshark pairs it, and this row stands
	// for the resend alone.
	Retransmission bool
}

// Stats counts what a Pairer decided.
type Stats struct {
	Answered, Unanswered, Orphans, Evicted, Retransmissions int64
	// Unpairable counts messages too short to hold a DNS header.
	Unpairable int64
}

// entry is a waiting query: in arrival order on a list, and in the chain
// of queries sharing its key (a client's retransmissions).
type entry struct {
	key        Key
	q          Query
	prev, next *entry // arrival order
	same       *entry // the next newer query with the same key
	// While a block is paired on its own (Split): the query's packet,
	// the clock before it, and the other queries between its hosts.
	idx          int
	at           time.Time
	hprev, hnext *entry
}

// Pairer pairs the records it is given; see the package comment.
type Pairer struct {
	// Window is how long a query waits; DefaultWindow when zero.
	Window time.Duration
	// MaxPending bounds the waiting queries; DefaultMaxPending when zero.
	// When full, the oldest waiting query is emitted Evicted.
	MaxPending int

	emit       func(*Txn)
	pending    map[Key]*entry // the oldest query of each key
	head, tail *entry
	n          int
	clock      time.Time // the latest packet time seen
	stats      Stats
	txn        Txn
	split      *splitState // see Split
}

// New returns a Pairer that calls emit with each transaction decided
// (valid during the call).
func New(emit func(*Txn)) *Pairer {
	return &Pairer{emit: emit, pending: map[Key]*entry{}}
}

func (p *Pairer) window() time.Duration {
	if p.Window > 0 {
		return p.Window
	}
	return DefaultWindow
}

func (p *Pairer) maxPending() int {
	if p.MaxPending > 0 {
		return p.MaxPending
	}
	return DefaultMaxPending
}

// Add takes the next record of the capture.
func (p *Pairer) Add(r *dnsrec.Record) { p.addAt(r, 0) }

func (p *Pairer) addAt(r *dnsrec.Record, idx int) {
	if r.Size < 12 {
		p.stats.Unpairable++
		return
	}
	at := p.clock
	if r.Time.After(p.clock) {
		p.clock = r.Time
		p.expire()
	}
	m := &r.Msg
	if !m.QR {
		k := Key{TCP: r.TCP, Client: r.Src, Server: r.Dst, ClientPort: r.SrcPort, ServerPort: r.DstPort, ID: m.ID}
		q := Query{Time: r.Time, Size: r.Size, IPVersion: r.IPVersion, Opcode: m.Opcode,
			RD: m.RD, CD: m.CD, EDNS: m.EDNS, DO: m.DO, UDPSize: m.UDPSize, HasQuestion: m.HasQuestion,
			QName: m.QName, QType: m.QType, QClass: m.QClass, TCPRTT: r.TCPRTT, HasTCPRTT: r.HasTCPRTT}
		if e := p.newest(k, &q, r.Time); e != nil && r.Time.Sub(e.q.Time) <= RetransmitWithin {
			// Sent again while the first send waits: the response, if
			// any, answers the first.
			p.stats.Retransmissions++
			p.txn = Txn{Key: k, Query: &q, Retransmission: true}
			p.emit(&p.txn)
			return
		}
		if p.n >= p.maxPending() {
			p.drop(p.head, true)
		}
		p.push(&entry{key: k, idx: idx, at: at, q: q})
		return
	}
	k := Key{TCP: r.TCP, Client: r.Dst, Server: r.Src, ClientPort: r.DstPort, ServerPort: r.SrcPort, ID: m.ID}
	// The newest transaction waiting with the same question is answered
	// (its first send: resends are not waiting), as tshark pairs it; a
	// second response finds none and is an orphan.
	q := Query{HasQuestion: m.HasQuestion, QName: m.QName, QType: m.QType, QClass: m.QClass}
	if match := p.newest(k, &q, r.Time); match != nil {
		p.remove(match)
		p.stats.Answered++
		p.txn = Txn{Key: k, Query: &match.q, Response: r}
		p.emit(&p.txn)
		return
	}
	p.stats.Orphans++
	p.txn = Txn{Key: k, Response: r}
	p.emit(&p.txn)
}

// newest returns the newest query waiting under k with the question of
// o, at packet time t. A query older than the window is never waiting
// here in a capture read whole; a join that has not yet seen every
// packet's time checks it so.
func (p *Pairer) newest(k Key, o *Query, t time.Time) *entry {
	var found *entry
	for e := p.pending[k]; e != nil; e = e.same {
		if sameQuestion(&e.q, o) && t.Sub(e.q.Time) <= p.window() {
			found = e
		}
	}
	return found
}

// sameQuestion reports whether two messages ask the same: the same
// question when both carry one (a response without a question, as to a
// FORMERR, answers by id alone).
func sameQuestion(a, b *Query) bool {
	if !a.HasQuestion || !b.HasQuestion {
		return true
	}
	return a.QType == b.QType && a.QClass == b.QClass && strings.EqualFold(a.QName, b.QName)
}

// expire emits, as unanswered, the queries whose window has passed.
func (p *Pairer) expire() {
	w := p.window()
	for p.head != nil && p.clock.Sub(p.head.q.Time) > w {
		p.drop(p.head, false)
	}
}

// Flush emits every waiting query as unanswered: the capture has ended.
func (p *Pairer) Flush() {
	for p.head != nil {
		p.drop(p.head, false)
	}
}

// Pending is how many queries wait for a response.
func (p *Pairer) Pending() int { return p.n }

// Stats returns the counts so far.
func (p *Pairer) Stats() Stats { return p.stats }

func (p *Pairer) drop(e *entry, evicted bool) {
	p.remove(e)
	if evicted {
		p.stats.Evicted++
	} else {
		p.stats.Unanswered++
	}
	p.txn = Txn{Key: e.key, Query: &e.q, Evicted: evicted}
	p.emit(&p.txn)
}

func (p *Pairer) push(e *entry) {
	e.prev = p.tail
	if p.tail != nil {
		p.tail.next = e
	} else {
		p.head = e
	}
	p.tail = e
	p.n++
	if s := p.split; s != nil {
		h := hostsOf(e.key.Client, e.key.Server)
		if e.hnext = s.waiting[h]; e.hnext != nil {
			e.hnext.hprev = e
		}
		s.waiting[h] = e
	}
	first := p.pending[e.key]
	if first == nil {
		p.pending[e.key] = e
		return
	}
	for first.same != nil {
		first = first.same
	}
	first.same = e
}

func (p *Pairer) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		p.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		p.tail = e.prev
	}
	p.n--
	if s := p.split; s != nil {
		if e.hprev != nil {
			e.hprev.hnext = e.hnext
		} else {
			s.waiting[hostsOf(e.key.Client, e.key.Server)] = e.hnext
		}
		if e.hnext != nil {
			e.hnext.hprev = e.hprev
		}
		e.hprev, e.hnext = nil, nil
	}
	first := p.pending[e.key]
	if first == e {
		if e.same != nil {
			p.pending[e.key] = e.same
		} else {
			delete(p.pending, e.key)
		}
		return
	}
	for first.same != e {
		first = first.same
	}
	first.same = e.same
}
