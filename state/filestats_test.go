package state

import "testing"

func TestFileStatsCountCommits(t *testing.T) {
	onBolt(t)
	db, _ := open(t)
	before := db.FileStats()
	if before.Bytes == 0 {
		t.Fatalf("a fresh metadata file of %d bytes; want its size", before.Bytes)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if _, _, err := db.CommitBlock(mk(seq, "aa")); err != nil {
			t.Fatal(err)
		}
	}
	after := db.FileStats()
	// Each commit writes at least its dirty pages and its meta page.
	if got := after.PageWrites - before.PageWrites; got < 6 {
		t.Errorf("3 commits made %d page writes; want at least 6", got)
	}
	if after.WriteTime <= before.WriteTime {
		t.Errorf("write time went from %v to %v over 3 commits", before.WriteTime, after.WriteTime)
	}
}
