package state

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/metakv"
)

// blockShapes are blocks whose records take each branch of the compact
// form.
func blockShapes() []Block {
	n := block.Name{Time: time.Date(2025, 5, 5, 15, 11, 5, 123456789, time.UTC), Seq: 42, Instance: "lax", Queue: "pcap.sz"}
	sum := "6dd9a2c4d6b0a6f4c3f8ebd5fa2b0e0f1f0d6c3e2b7a9d8c7e6f5a4b3c2d1e0f"
	usual := Block{Name: n.String(), Queue: n.Queue, Instance: n.Instance, Seq: n.Seq, Time: n.Time, Size: 1 << 20, SHA256: sum,
		Arrived: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Serial: 7, KernelDropped: 3}
	usual.Key = usualKey(usual)
	lake := usual
	lake.Queue, lake.Key = "dns.parquet", "dns.parquet/date=2025-05-05/site=lax/"+usual.Name+".sha256-"+sum+".parquet"
	odd := usual
	odd.SHA256, odd.Key = "aa", "k42" // tests' sums, and keys of no pattern
	upper := usual
	upper.SHA256 = strings.ToUpper(sum) // not the form the server writes: kept as text
	zero := Block{Name: "x", Queue: "q", Instance: "i"}
	far := usual
	far.Time, far.Seq, far.Serial, far.Size = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), 1<<63, 1<<64-1, -1
	old := usual
	old.Time = time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)
	final := usual
	final.Final = true
	ended := final
	ended.Ended = true // made by the server to end a silent site's capture
	return []Block{usual, lake, odd, upper, zero, far, old, final, ended}
}

func TestBlockRecordRoundTrip(t *testing.T) {
	for i, b := range blockShapes() {
		raw := encodeBlock(b)
		var got Block
		if err := decodeBlock(raw, &got); err != nil {
			t.Fatalf("%+v: %v", b, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, b)
		}
		if js, _ := json.Marshal(b); i == 0 && len(raw) > len(js)/4 {
			t.Errorf("%s: record of %d bytes, as JSON %d: want at most a quarter", b.Name, len(raw), len(js))
		}
		for n := 1; n < len(raw); n++ {
			if err := decodeBlock(raw[:n], &got); err == nil {
				t.Errorf("%s: a record cut to %d of %d bytes decoded", b.Name, n, len(raw))
			}
		}
	}
}

// TestBlockRecordsOfOlderServers: a metadata file written by a server
// before the compact form holds blocks as JSON; they are read as they
// are, and take the compact form when rewritten.
func TestBlockRecordsOfOlderServers(t *testing.T) {
	db, _ := open(t)
	b := blockShapes()[0]
	err := db.kv.Update(context.Background(), func(tx metakv.Tx) error {
		js, _ := json.Marshal(b)
		blocks, err := sub(tx, bucketBlocks, b.Queue)
		if err != nil {
			return err
		}
		return blocks.Put(blockKey(b.Instance, b.Seq), js)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.Lookup(b.ID())
	if err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("JSON record: %+v, %v; want %+v", got, err, b)
	}
	if _, st, err := db.CommitBlock(b); err != nil || st != Duplicate {
		t.Errorf("the same block again beside its JSON record: %s, %v; want duplicate", st, err)
	}
}

// FuzzBlockRecord: no bytes make the decoder panic, and what decodes
// encodes to a record that decodes to the same block.
func FuzzBlockRecord(f *testing.F) {
	for _, b := range blockShapes() {
		f.Add(encodeBlock(b))
		js, _ := json.Marshal(b)
		f.Add(js)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var b Block
		if decodeBlock(raw, &b) != nil {
			return
		}
		var again Block
		if err := decodeBlock(encodeBlock(b), &again); err != nil {
			t.Fatalf("%+v: %v", b, err)
		}
		if !again.Time.Equal(b.Time) || !again.Arrived.Equal(b.Arrived) {
			t.Fatalf("times: %v %v, then %v %v", b.Time, b.Arrived, again.Time, again.Arrived)
		}
		again.Time, again.Arrived, b.Time, b.Arrived = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(again, b) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", again, b)
		}
	})
}
