package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/metakv"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t *testing.T) (*DB, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var db *DB
	var err error
	if kv := openKV(t); kv != nil {
		db, err = OpenKV(context.Background(), kv, Options{Now: c.now})
	} else {
		db, err = Open(filepath.Join(t.TempDir(), "meta.db"), Options{Now: c.now})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Check(); err != nil {
			t.Errorf("database integrity: %v", err)
		}
		db.Close()
	})
	return db, c
}

func mk(seq uint64, sum string) Block {
	n := block.Name{Time: time.Date(2025, 5, 5, 15, 11, 5, 0, time.UTC), Seq: seq, Instance: "lax", Queue: "pcap.sz"}
	return Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time, Size: 10, SHA256: sum, Key: "k" + fmt.Sprint(seq)}
}

func TestCommitDuplicateConflict(t *testing.T) {
	db, _ := open(t)
	b, st, err := db.CommitBlock(mk(1, "aa"))
	if err != nil || st != Stored || b.Serial != 1 {
		t.Fatalf("first commit = %+v, %s, %v", b, st, err)
	}
	if _, st, err := db.CommitBlock(mk(1, "aa")); err != nil || st != Duplicate {
		t.Fatalf("same identity and checksum = %s, %v; want duplicate", st, err)
	}
	_, _, err = db.CommitBlock(mk(1, "bb"))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("same identity, other checksum = %v; want ErrConflict", err)
	}
	got, err := db.Lookup(mk(1, "").ID())
	if err != nil || got.SHA256 != "aa" {
		t.Fatalf("stored block was replaced: %+v, %v", got, err)
	}
	q, err := db.Queue("pcap.sz")
	if err != nil || q.Blocks != 1 || q.Bytes != 10 {
		t.Fatalf("queue = %+v, %v; want 1 block of 10 bytes", q, err)
	}
	if _, err := db.Lookup(block.ID{Queue: "pcap.sz", Instance: "lax", Seq: 9}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of a missing block = %v", err)
	}
}

func TestGroupsReserveAck(t *testing.T) {
	db, c := open(t)
	for i := uint64(1); i <= 3; i++ {
		db.CommitBlock(mk(i, "s"))
	}
	if _, err := db.EnsureGroup("pcap.sz", "early", Earliest); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsureGroup("pcap.sz", "late", Latest); err != nil {
		t.Fatal(err)
	}
	db.CommitBlock(mk(4, "s"))

	// early is owed 1..4, late only 4.
	var got []uint64
	for {
		b, ok, err := db.Reserve("pcap.sz", "early", "r1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, b.Seq)
	}
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("early reserved %v, want [1 2 3 4]", got)
	}
	if b, ok, _ := db.Reserve("pcap.sz", "late", "r2", time.Minute); !ok || b.Seq != 4 {
		t.Fatalf("late reserved %+v %v, want block 4", b, ok)
	}

	// Ack 1 and 3; after the visibility timeout 2 and 4 come back.
	if n, err := db.Ack("pcap.sz", "early", []block.ID{mk(1, "").ID(), mk(3, "").ID()}); err != nil || n != 2 {
		t.Fatalf("ack = %d, %v", n, err)
	}
	if n, err := db.Ack("pcap.sz", "early", []block.ID{mk(1, "").ID()}); err != nil || n != 0 {
		t.Fatalf("second ack = %d, %v; want 0, nil", n, err)
	}
	if _, ok, _ := db.Reserve("pcap.sz", "early", "r1", time.Minute); ok {
		t.Fatal("a reserved block was handed out again before its timeout")
	}
	if exp, _ := db.NextExpiry("pcap.sz", "early"); !exp.Equal(c.t.Add(time.Minute)) {
		t.Fatalf("NextExpiry = %v", exp)
	}
	c.t = c.t.Add(61 * time.Second)
	b, ok, _ := db.Reserve("pcap.sz", "early", "r3", time.Minute)
	if !ok || b.Seq != 2 {
		t.Fatalf("after the timeout got %+v %v, want block 2 again", b, ok)
	}
	// A reader that fails mid-block releases it; a stale reader cannot
	// release what another now holds.
	if err := db.Release("pcap.sz", "early", "r1", b.Serial); err != nil {
		t.Fatal(err)
	}
	if other, ok, _ := db.Reserve("pcap.sz", "early", "r9", time.Minute); !ok || other.Seq != 4 {
		t.Fatalf("after a stale release got %+v %v; want block 4 (2 is still r3's)", other, ok)
	}
	if err := db.Release("pcap.sz", "early", "r3", b.Serial); err != nil {
		t.Fatal(err)
	}
	if again, ok, _ := db.Reserve("pcap.sz", "early", "r4", time.Minute); !ok || again.Seq != 2 {
		t.Fatalf("released block not handed out at once: %+v %v", again, ok)
	}
	stats, err := db.Groups("pcap.sz")
	if err != nil || len(stats) != 2 {
		t.Fatal(stats, err)
	}
	if s := stats[0]; s.Group != "early" || s.Done != 2 || s.Reserved != 2 || s.Unreserved != 0 {
		t.Fatalf("early stats = %+v; want 2 done, 2 reserved", s)
	}

	// Per block and group, as the dashboard's queue page shows them:
	// early has 1 and 3 done, 2 and 4 reserved; late was never owed 1..3
	// and its reservation of 4 has lapsed.
	dels, err := db.DeliveriesOf("pcap.sz", []uint64{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for s := uint64(1); s <= 5; s++ {
		states = append(states, fmt.Sprintf("%d:%s/%s", s, dels[s]["early"].State, dels[s]["late"].State))
	}
	if got := fmt.Sprint(states); got != "[1:DONE/ 2:RESERVED/ 3:DONE/ 4:RESERVED/UNRESERVED 5:/]" {
		t.Fatalf("DeliveriesOf = %s", got)
	}

	if _, err := db.Ack("pcap.sz", "nope", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ack on a missing group = %v", err)
	}
	if _, err := db.Ack("pcap.sz", "late", []block.ID{mk(1, "").ID()}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ack of a block not owed = %v", err)
	}
	if _, err := db.EnsureGroup("pcap.sz", "../x", Earliest); err == nil {
		t.Fatal("group name ../x accepted")
	}
}

func TestBlocksPaging(t *testing.T) {
	db, _ := open(t)
	for i := uint64(1); i <= 5; i++ {
		db.CommitBlock(mk(i, "s"))
	}
	page, err := db.Blocks("pcap.sz", 2, 2)
	if err != nil || len(page) != 2 || page[0].Seq != 3 || page[1].Seq != 4 {
		t.Fatalf("Blocks(after 2, limit 2) = %+v, %v", page, err)
	}
	if n, _ := db.LastSerial("pcap.sz"); n != 5 {
		t.Fatalf("LastSerial = %d", n)
	}
	if seq, ok, err := db.LastSeq("pcap.sz", "lax"); err != nil || !ok || seq != 5 {
		t.Fatalf("LastSeq(lax) = %d %v %v; want 5", seq, ok, err)
	}
	other := mk(9, "s")
	other.Instance = "la" // a prefix of "lax" must not match
	db.CommitBlock(other)
	if seq, ok, _ := db.LastSeq("pcap.sz", "la"); !ok || seq != 9 {
		t.Fatalf("LastSeq(la) = %d %v; want 9", seq, ok)
	}
	if _, ok, _ := db.LastSeq("pcap.sz", "nyc"); ok {
		t.Fatal("LastSeq of an instance with no blocks found one")
	}
	if page, _ := db.Blocks("nope", 0, 10); len(page) != 0 {
		t.Fatalf("blocks of a missing queue: %v", page)
	}
}

// TestMissingRecent counts the sequence numbers a site lacks among its
// latest ones: holes between the lowest stored in the span and the
// highest, not numbers below the span or below the lowest kept.
func TestMissingRecent(t *testing.T) {
	db, _ := open(t)
	for _, seq := range []uint64{3, 4, 6, 9, 10} { // 1 and 2 long gone; 5, 7 and 8 missing
		if _, _, err := db.CommitBlock(mk(seq, "s")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ last, span, want uint64 }{
		{10, 1024, 3}, // 5, 7, 8 (nothing below 3 is counted)
		{10, 5, 2},    // 6..10: 7, 8
		{10, 2, 0},    // 9, 10
		{4, 1024, 0},
		{12, 1024, 5}, // 11 and 12 were never stored either
	} {
		got, err := db.MissingRecent("pcap.sz", "lax", c.last, c.span)
		if err != nil || got != c.want {
			t.Errorf("MissingRecent(last %d, span %d) = %d, %v; want %d", c.last, c.span, got, err, c.want)
		}
	}
	if got, err := db.MissingRecent("pcap.sz", "nowhere", 10, 1024); err != nil || got != 0 {
		t.Errorf("a site with no blocks: %d, %v", got, err)
	}
}

// The hand reader of short delivery records must read every record as
// encoding/json would, and leave every other shape to it.
func TestDecodeDeliveryAsJSON(t *testing.T) {
	until := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	for _, d := range []Delivery{
		{State: Unreserved},
		{State: Done, Attempts: 1},
		{State: Faulty, Attempts: 123456789},
		{State: Reserved, Attempts: 2, Until: until, Reserver: "w1"},
		{State: Reserved, Attempts: 1, Until: until.Add(123456789), Reserver: `stream "a\b" é`},
		{State: Reserved, Attempts: 1, Reserver: "w1"},
		{State: Unreserved, Attempts: 2, Until: until.In(time.FixedZone("x", 3600))},
		{State: Unreserved, Attempts: 3, Until: until, LastError: `exit 1: "boom"`},
		{State: Lost, Block: "20250101-000000-00000001.s000.tiny"},
	} {
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var got, want Delivery
		json.Unmarshal(raw, &want)
		if err := decode(raw, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("decode(%s) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{`{"state":"DONE","attempts":-1}`, `{"state":"DONE","attempts":}`, `{"state":"DONE","attempts":1`,
		`{"state":"DONE","attempts":1234567890123}`, `{"state":"NEW","attempts":1}`, `{"state":"DONE","attempts":1,"x":2}`,
		`{"state":"DONE","attempts":1,"until":"never"}`, `{"state":"DONE","attempts":01}`, `{"state":"DONE","attempts":1,"reserver":"a"`} {
		var got, want Delivery
		err := decode([]byte(raw), &got)
		wantErr := json.Unmarshal([]byte(raw), &want)
		if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("decode(%s) = %+v, %v; encoding/json gives %+v, %v", raw, got, err, want, wantErr)
		}
	}
}

// TestSiteTails: what a window stage replays after a restart is, per
// site, its owed blocks and the horizon below them with one bracket, not
// the queue's history. Site "a" is a prefix of "ab", as in the keys.
func TestSiteTails(t *testing.T) {
	db, _ := open(t)
	if _, err := db.EnsureGroup("q", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 50; seq++ {
		for _, site := range []string{"a", "ab", "b"} {
			n := block.Name{Time: at.Add(time.Duration(seq) * time.Minute), Seq: seq, Instance: site, Queue: "q"}
			if _, _, err := db.CommitBlock(Block{Name: n.String(), Queue: "q", Instance: site, Seq: seq, Time: n.Time, Size: 1, SHA256: "s", Key: n.String()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a owes 41 on, ab nothing, b 10 on.
	var done []block.ID
	for seq := uint64(1); seq <= 50; seq++ {
		if seq <= 40 {
			done = append(done, block.ID{Queue: "q", Instance: "a", Seq: seq})
		}
		done = append(done, block.ID{Queue: "q", Instance: "ab", Seq: seq})
		if seq < 10 {
			done = append(done, block.ID{Queue: "q", Instance: "b", Seq: seq})
		}
	}
	if _, err := db.Ack("q", "g", done); err != nil {
		t.Fatal(err)
	}
	tails, err := db.SiteTails("q", "g", 0, func(low, b Block) bool { return b.Seq+5 >= low.Seq })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uint64{}
	var last uint64
	for _, b := range tails.Blocks {
		got[b.Instance] = append(got[b.Instance], b.Seq)
		if b.Serial <= last {
			t.Errorf("block %s (serial %d) after serial %d: not in arrival order", b.Name, b.Serial, last)
		}
		last = b.Serial
	}
	span := func(lo, hi uint64) []uint64 {
		var s []uint64
		for q := lo; q <= hi; q++ {
			s = append(s, q)
		}
		return s
	}
	// Five below the pivot are needed, and one more is the bracket.
	want := map[string][]uint64{"a": span(35, 50), "ab": span(44, 50), "b": span(4, 50)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replayed %v, want %v", got, want)
	}
	if tails.Newest != 150 || !reflect.DeepEqual(tails.Owed, map[string]uint64{"a": 41, "b": 10}) {
		t.Errorf("newest %d, owed %v; want 150 and a:41 b:10", tails.Newest, tails.Owed)
	}
}

// TestGroupStatsCountSettled: a group's stats count the deliveries below
// its floor from a kept count, not by reading them, and stay exact as the
// floor moves and retention deletes settled deliveries.
func TestGroupStatsCountSettled(t *testing.T) {
	db, c := open(t)
	for seq := uint64(1); seq <= 10; seq++ {
		if _, _, err := db.CommitBlock(mk(seq, fmt.Sprint("s", seq))); err != nil {
			t.Fatal(err)
		}
		c.t = c.t.Add(time.Hour)
	}
	if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	ack := func(seqs ...uint64) {
		t.Helper()
		var ids []block.ID
		for _, q := range seqs {
			ids = append(ids, mk(q, "").ID())
		}
		if _, err := db.Ack("pcap.sz", "g", ids); err != nil {
			t.Fatal(err)
		}
	}
	stats := func(wantDone, wantOwed int, wantFloor uint64) {
		t.Helper()
		gs, err := db.Groups("pcap.sz")
		if err != nil || len(gs) != 1 || gs[0].Done != wantDone || gs[0].Unreserved != wantOwed {
			t.Fatalf("stats %+v, %v; want %d done, %d owed", gs, err, wantDone, wantOwed)
		}
		g, err := db.GetGroup("pcap.sz", "g")
		if err != nil || g.Floor != wantFloor || !g.DoneDeleted {
			t.Fatalf("group %+v, %v; want floor %d, counted", g, err, wantFloor)
		}
	}
	ack(1, 2, 3, 4, 5, 6)
	stats(6, 4, 6)
	ack(8) // above the floor
	stats(7, 3, 6)
	ack(7)
	stats(8, 2, 8)
	// Retention takes the five oldest (settled) blocks.
	if err := db.SetPolicy("pcap.sz", Policy{Retention: "6h", MaxAge: 6 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	res, err := db.Expire("pcap.sz", 100)
	if err != nil || len(res.Deleted) != 5 {
		t.Fatalf("expire: %d deleted, %v; want 5", len(res.Deleted), err)
	}
	stats(3, 2, 8)
}

// TestReserveAfter: a following reader reserves past the last block it
// reserved without walking over the ones it holds; blocks whose
// reservation expired below that are found from the floor.
func TestReserveAfter(t *testing.T) {
	db, c := open(t)
	for seq := uint64(1); seq <= 5; seq++ {
		if _, _, err := db.CommitBlock(mk(seq, fmt.Sprint("s", seq))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	next := func(after uint64) uint64 {
		t.Helper()
		bs, err := db.ReserveAfter("pcap.sz", "g", "r", time.Second, after, 1, 0)
		if err != nil || len(bs) > 1 {
			t.Fatal(bs, err)
		}
		if len(bs) == 0 {
			return 0
		}
		return bs[0].Seq
	}
	for want := uint64(1); want <= 3; want++ {
		if got := next(want - 1); got != want {
			t.Fatalf("reserve after %d: block %d, want %d", want-1, got, want)
		}
	}
	if got := next(3); got != 4 {
		t.Fatalf("reserve after 3: block %d, want 4", got)
	}
	c.t = c.t.Add(2 * time.Second) // 1 to 4 expire
	if got := next(4); got != 5 {
		t.Fatalf("reserve after 4: block %d, want 5", got)
	}
	if got := next(5); got != 0 {
		t.Fatalf("reserve after 5: block %d, want none", got)
	}
	if got := next(0); got != 1 {
		t.Fatalf("reserve from the floor: block %d, want 1, whose reservation expired", got)
	}
}

// TestReserveAhead: a reader of small blocks reserves several in one
// commit, up to a count and a byte bound (the first whatever its size);
// what it reserved ahead and never sent goes back uncounted.
func TestReserveAhead(t *testing.T) {
	db, _ := open(t)
	for seq := uint64(1); seq <= 6; seq++ {
		if _, _, err := db.CommitBlock(mk(seq, fmt.Sprint("s", seq))); err != nil { // 10 bytes each
			t.Fatal(err)
		}
	}
	if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	seqs := func(bs []Block) (out []uint64) {
		for _, b := range bs {
			out = append(out, b.Seq)
		}
		return out
	}
	for _, c := range []struct {
		most  int
		bytes int64
		want  []uint64
	}{{2, 0, []uint64{1, 2}}, {10, 25, []uint64{3, 4}}, {10, 5, []uint64{5}}, {10, 0, []uint64{6}}} {
		bs, err := db.ReserveAfter("pcap.sz", "g", "r", time.Minute, 0, c.most, c.bytes)
		if err != nil || !slices.Equal(seqs(bs), c.want) {
			t.Fatalf("reserve %d, %d bytes: %v, %v; want %v", c.most, c.bytes, seqs(bs), err, c.want)
		}
	}
	if err := db.Unreserve("pcap.sz", "g", "r", 3, 4); err != nil {
		t.Fatal(err)
	}
	bs, err := db.ReserveAfter("pcap.sz", "g", "r2", time.Minute, 0, 10, 0)
	if err != nil || !slices.Equal(seqs(bs), []uint64{3, 4}) {
		t.Fatalf("after unreserving 3 and 4: %v, %v", seqs(bs), err)
	}
	res, _, err := db.ReserveJoin([]string{"pcap.sz"}, "g", "r3", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Blocks) != 0 {
		t.Fatalf("every block is reserved, yet %v", res)
	}
	var attempts []int
	for _, seq := range []uint64{1, 3} {
		db.kv.View(context.Background(), func(tx metakv.Tx) error {
			del, _, _ := getRecord[Delivery](mustSub(tx, bucketDeliveries, "pcap.sz", "g"), u64(seq))
			attempts = append(attempts, del.Attempts)
			return nil
		})
	}
	if !slices.Equal(attempts, []int{1, 1}) {
		t.Errorf("attempts of blocks 1 and 3 = %v; want 1 each (3's first reservation was never sent)", attempts)
	}
}

// deliveryRecords counts the delivery records a group keeps.
func deliveryRecords(t *testing.T, db *DB, queue, group string) int {
	t.Helper()
	n := 0
	db.kv.View(context.Background(), func(tx metakv.Tx) error {
		if dels := mustSub(tx, bucketDeliveries, queue, group); dels != nil {
			dels.ForEach(func(_, _ []byte) error { n++; return nil })
		}
		return nil
	})
	return n
}

// TestDoneDeliveriesAreCleared: a group keeps the delivery records of
// what it has open, not of its history: DONE ones go, and every question
// about them still has its old answer.
func TestDoneDeliveriesAreCleared(t *testing.T) {
	db, _ := open(t)
	for seq := uint64(1); seq <= 10; seq++ {
		if _, _, err := db.CommitBlock(mk(seq, fmt.Sprint("s", seq))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	var ids []block.ID
	for seq := uint64(1); seq <= 6; seq++ {
		ids = append(ids, mk(seq, "").ID())
	}
	if n, err := db.Ack("pcap.sz", "g", ids[:5]); err != nil || n != 5 {
		t.Fatalf("ack 1-5: %d, %v", n, err)
	}
	if n, err := db.Ack("pcap.sz", "g", ids[5:]); err != nil || n != 1 {
		t.Fatalf("ack 6: %d, %v", n, err)
	}
	if got := deliveryRecords(t, db, "pcap.sz", "g"); got != 4 {
		t.Errorf("%d delivery records after 6 of 10 blocks were done; want 4", got)
	}
	stats, err := db.Groups("pcap.sz")
	if err != nil || len(stats) != 1 || stats[0].Done != 6 || stats[0].Unreserved != 4 {
		t.Fatalf("stats %+v, %v; want 6 done and 4 unreserved", stats, err)
	}
	if n, err := db.Ack("pcap.sz", "g", ids[2:3]); err != nil || n != 0 {
		t.Errorf("acking a cleared block again: %d, %v; want 0, nil", n, err)
	}
	// Above the floor too: a site gone silent holds the floor of a
	// window stage for ever, and what is done past it must not pile up.
	if n, err := db.Ack("pcap.sz", "g", []block.ID{mk(9, "").ID()}); err != nil || n != 1 {
		t.Fatalf("ack 9: %d, %v", n, err)
	}
	if got := deliveryRecords(t, db, "pcap.sz", "g"); got != 3 {
		t.Errorf("%d delivery records after 7 of 10 blocks were done; want 3", got)
	}
	if g, _ := db.GetGroup("pcap.sz", "g"); g.Floor != 6 {
		t.Errorf("floor %d; want 6, below block 7", g.Floor)
	}
	b2, _ := db.Lookup(ids[1])
	b8, _ := db.Lookup(mk(8, "").ID())
	dels, err := db.DeliveriesOf("pcap.sz", []uint64{b2.Serial, b8.Serial})
	if err != nil || dels[b2.Serial]["g"].State != Done || dels[b8.Serial]["g"].State != Unreserved {
		t.Errorf("deliveries of blocks 2 and 8: %v, %v; want DONE and UNRESERVED", dels, err)
	}
	if _, deleted, err := db.DeleteConsumed("pcap.sz", b2.Serial); err != nil || !deleted {
		t.Fatalf("retention of a consumed block whose delivery was cleared: %v, %v", deleted, err)
	}
	if _, deleted, err := db.DeleteConsumed("pcap.sz", b8.Serial); err != nil || deleted {
		t.Fatalf("retention of an owed block: %v, %v", deleted, err)
	}
	if stats, _ := db.Groups("pcap.sz"); stats[0].Done != 6 || stats[0].Unreserved != 3 {
		t.Errorf("after block 2 was deleted the group counts %+v; want 6 done, 3 owed", stats[0])
	}
}

// TestLongHistoryIsClearedInPieces: a group an older server made kept
// the DONE record of every block. At its next change it counts them
// once, and loses them a piece at a time as its floor moves, never in
// one huge transaction; its stats say the same throughout.
func TestLongHistoryIsClearedInPieces(t *testing.T) {
	db, _ := open(t)
	old := uint64(clearMost + 10)
	for seq := uint64(1); seq <= 3; seq++ {
		if _, _, err := db.CommitBlock(mk(seq, fmt.Sprint("s", seq))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	err := db.kv.Update(context.Background(), func(tx metakv.Tx) error {
		// Blocks 1-3 are serials 1-3; 4..old+3 are an older server's
		// history of other blocks, DONE, their records kept, as its
		// groups did (no DoneDeleted).
		dels := mustSub(tx, bucketDeliveries, "pcap.sz", "g")
		for s := uint64(4); s <= old+3; s++ {
			if err := putRecord(dels, u64(s), Delivery{State: Done, Attempts: 1}); err != nil {
				return err
			}
		}
		groups, g, err := loadGroup(tx, "pcap.sz", "g")
		if err != nil {
			return err
		}
		g.DoneDeleted, g.SettledKnown = false, true
		return putRecord(groups, []byte("g"), g)
	})
	if err != nil {
		t.Fatal(err)
	}
	done := func() int {
		stats, err := db.Groups("pcap.sz")
		if err != nil {
			t.Fatal(err)
		}
		return stats[0].Done
	}
	if got := done(); got != int(old) {
		t.Fatalf("before: %d done, want %d", got, old)
	}
	want := []int{int(old) + 2 - clearMost, 1} // then block 3, open
	for i, seq := range []uint64{1, 2} {
		if _, err := db.Ack("pcap.sz", "g", []block.ID{mk(seq, "").ID()}); err != nil {
			t.Fatal(err)
		}
		if got := deliveryRecords(t, db, "pcap.sz", "g"); got != want[i] {
			t.Errorf("after the ack of block %d: %d delivery records, want %d", seq, got, want[i])
		}
		if got := done(); got != int(old)+i+1 {
			t.Errorf("after the ack of block %d: %d done, want %d", seq, got, int(old)+i+1)
		}
	}
	g, err := db.GetGroup("pcap.sz", "g")
	if err != nil || !g.DoneDeleted || g.Legacy != 0 || g.Floor != 2 {
		t.Errorf("group %+v, %v; want migrated, no legacy records left, floor 2", g, err)
	}
}

// TestSetAsideDoesNotHoldTheFloor: a FAULTY or LOST block early in a
// queue held a group's floor below it for ever, so every later scan of
// what the group owed walked all it had done since. The floor now
// passes them, and they are still listed, counted, and retried.
func TestSetAsideDoesNotHoldTheFloor(t *testing.T) {
	db, _ := open(t)
	var ids []block.ID
	for seq := uint64(1); seq <= 10; seq++ {
		b, _, err := db.CommitBlock(mk(seq, fmt.Sprint("s", seq)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.ID())
	}
	if _, err := db.EnsureGroup("pcap.sz", "g", Earliest); err != nil {
		t.Fatal(err)
	}
	b1, ok, err := db.Reserve("pcap.sz", "g", "r", time.Minute)
	if err != nil || !ok || b1.Seq != 1 {
		t.Fatal(b1, ok, err)
	}
	if faulty, err := db.FailRun(Run{Group: "g", Reserver: "r", Inputs: []Block{b1}}, "it broke", 1, time.Time{}); err != nil || !faulty {
		t.Fatalf("fail: %v, %v", faulty, err)
	}
	b2, _ := db.Lookup(ids[1])
	if ok, err := db.MarkLost(ids[1], b2.Key, "its blob is gone"); err != nil || !ok {
		t.Fatalf("mark lost: %v, %v", ok, err)
	}
	if _, err := db.Ack("pcap.sz", "g", ids[2:]); err != nil {
		t.Fatal(err)
	}
	if got := deliveryRecords(t, db, "pcap.sz", "g"); got != 2 {
		t.Errorf("%d delivery records; want 2, the FAULTY and the LOST", got)
	}
	g, _ := db.GetGroup("pcap.sz", "g")
	if g.Floor != 10 {
		t.Errorf("floor %d; want 10, past what was set aside", g.Floor)
	}
	stats, _ := db.Groups("pcap.sz")
	if s := stats[0]; s.Done != 8 || s.Faulty != 1 || s.Lost != 1 || s.Unreserved != 0 {
		t.Errorf("stats %+v; want 8 done, 1 faulty, 1 lost", s)
	}
	if fb, err := db.Faulty("pcap.sz"); err != nil || len(fb) != 1 || fb[0].Block != b1.Name {
		t.Errorf("faulty %+v, %v", fb, err)
	}
	if lb, err := db.LostBlocks("pcap.sz", "g"); err != nil || len(lb) != 1 || lb[0].Block != b2.Name {
		t.Errorf("lost %+v, %v", lb, err)
	}
	if backlog, faulty, err := db.Owed("pcap.sz", "g"); err != nil || backlog != 0 || faulty != 1 {
		t.Errorf("owed %d backlog, %d faulty, %v; want 0 and 1", backlog, faulty, err)
	}
	if n, err := db.Retry("pcap.sz", ""); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	again, ok, err := db.Reserve("pcap.sz", "g", "r2", time.Minute)
	if err != nil || !ok || again.Seq != 1 {
		t.Fatalf("after a retry, reserve gave %+v %v %v; want block 1", again, ok, err)
	}
	if _, err := db.Ack("pcap.sz", "g", ids[:1]); err != nil {
		t.Fatal(err)
	}
	stats, _ = db.Groups("pcap.sz")
	if s := stats[0]; s.Done != 9 || s.Faulty != 0 || s.Lost != 1 {
		t.Errorf("stats after the retried block was done: %+v; want 9 done, 1 lost", s)
	}
	if got := deliveryRecords(t, db, "pcap.sz", "g"); got != 1 {
		t.Errorf("%d delivery records; want 1, the LOST", got)
	}
}

// TestGroupFromTime: a group started at a time is owed the blocks kept
// whose time is at or after it, in arrival order, and every block that
// arrives after it is made, whatever its time; the blocks before count
// as done, and stay counted right when retention deletes them.
func TestGroupFromTime(t *testing.T) {
	db, c := open(t)
	base := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	at := func(seq uint64, h int) Block {
		n := block.Name{Time: base.Add(time.Duration(h) * time.Hour), Seq: seq, Instance: "lax", Queue: "pcap.sz"}
		return Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: seq, Time: n.Time, Size: 10, SHA256: "s", Key: "k" + fmt.Sprint(seq)}
	}
	// Arrival order is not time order: 3 is late and older.
	for _, b := range []Block{at(1, 10), at(2, 11), at(3, 9), at(4, 12)} {
		if _, _, err := db.CommitBlock(b); err != nil {
			t.Fatal(err)
		}
	}
	from := From(base.Add(11 * time.Hour).Format(time.RFC3339))
	if _, err := db.EnsureGroup("pcap.sz", "replay", from); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnsureGroup("pcap.sz", "bad", "yesterday"); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("a start that is no time: %v", err)
	}
	db.CommitBlock(at(5, 1)) // arrives after: owed, old as it is
	var got []uint64
	for {
		b, ok, err := db.Reserve("pcap.sz", "replay", "r", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, b.Seq)
		if _, err := db.Ack("pcap.sz", "replay", []block.ID{b.ID()}); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != "[2 4 5]" {
		t.Fatalf("a group from 11:00 got %v; want [2 4 5]", got)
	}
	stats := func() GroupStats {
		gs, err := db.Groups("pcap.sz")
		if err != nil || len(gs) != 1 {
			t.Fatalf("groups: %+v %v", gs, err)
		}
		return gs[0]
	}
	if s := stats(); s.Done != 5 || s.Unreserved != 0 {
		t.Errorf("stats %+v; want the five blocks done, the two before the start among them", s)
	}
	// Retention deletes everything: the done count goes with the blocks.
	if err := db.SetPolicy("pcap.sz", Policy{Retention: "1h", MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(48 * time.Hour)
	if res, err := db.Expire("pcap.sz", 100); err != nil || len(res.Deleted) != 5 {
		t.Fatalf("expire: %+v %v", res, err)
	}
	if s := stats(); s.Done != 0 {
		t.Errorf("stats after the blocks went: %+v", s)
	}
}
