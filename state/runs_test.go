package state

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func inQueue(b Block, queue string) Block {
	b.Queue = queue
	b.Name = b.Name[:len(b.Name)-len("pcap.sz")] + queue
	return b
}

// TestRunCommitsOnceWhateverTheTiming runs a stage over one block: a run
// that lost its reservation to a second run can neither commit nor fail,
// and the second run's commit publishes the output and finishes the input
// in one step.
func TestRunCommitsOnceWhateverTheTiming(t *testing.T) {
	db, c := open(t)
	if _, err := db.EnsureGroup("pcap.sz", "stage-a", Earliest); err != nil {
		t.Fatal(err)
	}
	in, _, _ := db.CommitBlock(mk(1, "aa"))
	res, ok, err := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "run1", time.Minute)
	first := res.Blocks
	if err != nil || !ok || first[0].Serial != in.Serial || res.Attempt != 1 {
		t.Fatalf("reserve = %v %v %v", res, ok, err)
	}
	c.t = c.t.Add(2 * time.Minute) // run1 times out
	res, ok, _ = db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "run2", time.Minute)
	second := res.Blocks
	if !ok || res.Attempt != 2 {
		t.Fatal("expired reservation not handed out again")
	}
	out := inQueue(mk(1, "cc"), "pcap.xz")
	late := Run{Group: "stage-a", Reserver: "run1", Inputs: first, Outputs: []Block{out}}
	if _, err := db.CommitRun(late); !errors.Is(err, ErrLostReservation) {
		t.Fatalf("late commit = %v, want ErrLostReservation", err)
	}
	if _, err := db.FailRun(late, "x", 4, c.t); !errors.Is(err, ErrLostReservation) {
		t.Fatalf("late failure = %v, want ErrLostReservation", err)
	}
	if _, err := db.Queue("pcap.xz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("late run published: %v", err)
	}
	pub, err := db.CommitRun(Run{Group: "stage-a", Reserver: "run2", Inputs: second, Outputs: []Block{out}})
	if err != nil || len(pub) != 1 || pub[0].Serial != 1 {
		t.Fatalf("commit = %v, %v", pub, err)
	}
	if _, err := db.CommitRun(Run{Group: "stage-a", Reserver: "run2", Inputs: second, Outputs: []Block{out}}); !errors.Is(err, ErrLostReservation) {
		t.Fatalf("second commit of the same run = %v", err)
	}
	if q, _ := db.Queue("pcap.xz"); q.Blocks != 1 {
		t.Fatalf("output queue holds %d blocks", q.Blocks)
	}
	if n, held, _ := db.Backlog("pcap.sz", "stage-a"); n != 0 || held != 0 {
		t.Fatalf("backlog after commit = %d ready, %d held", n, held)
	}
}

func TestRunFailuresEndFaultyAndRetry(t *testing.T) {
	db, c := open(t)
	db.EnsureGroup("pcap.sz", "stage-a", Earliest)
	db.CommitBlock(mk(1, "aa"))
	db.CommitBlock(mk(2, "bb"))
	for attempt := 1; attempt <= 4; attempt++ {
		res, ok, err := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "r", time.Minute)
		if err != nil || !ok || res.Blocks[0].Seq != 1 || res.Attempt != attempt {
			t.Fatalf("attempt %d: reserve = %v %v %v", attempt, res, ok, err)
		}
		faulty, err := db.FailRun(Run{Group: "stage-a", Reserver: "r", Inputs: res.Blocks}, "exit status 3: boom", 4, c.t.Add(time.Second))
		if err != nil || faulty != (attempt == 4) {
			t.Fatalf("attempt %d: faulty=%v err=%v", attempt, faulty, err)
		}
		if attempt < 4 {
			// During the backoff the next block goes first.
			res, ok, _ := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "other", time.Minute)
			if attempt == 1 && (!ok || res.Blocks[0].Seq != 2) {
				t.Fatalf("during backoff got %v %v, want block 2", res, ok)
			}
			c.t = c.t.Add(2 * time.Second)
		}
	}
	fb, err := db.Faulty("")
	if err != nil || len(fb) != 1 || fb[0].Attempts != 4 || fb[0].Error != "exit status 3: boom" || fb[0].Group != "stage-a" {
		t.Fatalf("faulty = %+v, %v", fb, err)
	}
	if n, err := db.Retry("pcap.sz", fb[0].Block); err != nil || n != 1 {
		t.Fatalf("retry = %d, %v", n, err)
	}
	if res, ok, _ := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "r", time.Minute); !ok || res.Blocks[0].Seq != 1 {
		t.Fatalf("retried block not handed out: %v", res)
	}
	// Block 2 is held by "other" and block 1 by "r": two runs.
	none := func(string) bool { return false }
	if n, f, _ := db.ResetReservations("stage-a", []string{"pcap.sz"}, none, "", 4); n != 2 || f != 0 {
		t.Fatalf("reset %d reservations (%d faulty), want 2", n, f)
	}
}

// TestCrashedRunsCount: a run the previous process held when it died
// counts as an attempt; out of attempts, its block is FAULTY with the
// reason, so a block that kills the server cannot do it for ever.
// Leases (remote runs) are handed back uncounted.
func TestCrashedRunsCount(t *testing.T) {
	db, _ := open(t)
	db.EnsureGroup("pcap.sz", "stage-a", Earliest)
	db.CommitBlock(mk(1, "aa"))
	db.CommitBlock(mk(2, "bb"))
	local := func(r string) bool { return !strings.HasPrefix(r, "lease-") }
	const why = "the server stopped during this run"
	for crash := 1; crash <= 3; crash++ {
		res, ok, _ := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "boot-run", time.Minute)
		if !ok || res.Blocks[0].Seq != 1 || res.Attempt != crash {
			t.Fatalf("crash %d: reserved %+v %v", crash, res, ok)
		}
		if crash == 1 {
			if _, ok, _ := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "lease-x", time.Minute); !ok {
				t.Fatal("block 2 to a worker")
			}
		}
		n, f, err := db.ResetReservations("stage-a", []string{"pcap.sz"}, local, why, 3)
		if err != nil || f != map[bool]int{true: 1}[crash == 3] {
			t.Fatalf("crash %d: reset %d faulty %d %v", crash, n, f, err)
		}
	}
	fb, _ := db.Faulty("pcap.sz")
	if len(fb) != 1 || fb[0].Attempts != 3 || fb[0].Error != why {
		t.Fatalf("faulty %+v", fb)
	}
	// The worker's block was handed back with its attempt undone.
	if res, ok, _ := db.ReserveJoin([]string{"pcap.sz"}, "stage-a", "r", time.Minute); !ok || res.Blocks[0].Seq != 2 || res.Attempt != 1 {
		t.Fatalf("block 2 after the restart: %+v %v", res, ok)
	}
}

func TestReserveJoinWaitsForEveryInput(t *testing.T) {
	db, _ := open(t)
	queues := []string{"pcap.sz", "dns.arrow"}
	for _, q := range queues {
		db.EnsureGroup(q, "join", Earliest)
	}
	db.CommitBlock(mk(1, "aa"))
	db.CommitBlock(mk(2, "bb"))
	db.CommitBlock(inQueue(mk(2, "cc"), "dns.arrow"))
	res, ok, err := db.ReserveJoin(queues, "join", "r", time.Minute)
	set := res.Blocks
	if err != nil || !ok || len(set) != 2 || set[0].Seq != 2 || set[1].Queue != "dns.arrow" || set[1].Seq != 2 {
		t.Fatalf("join = %+v %v %v; want seq 2 from both queues", set, ok, err)
	}
	if _, ok, _ := db.ReserveJoin(queues, "join", "r", time.Minute); ok {
		t.Fatal("seq 1 handed out without its dns.arrow half")
	}
}

// TestCarryIsBounded: a run's carried state (from a worker over
// commit-lease, say) over MaxCarry is refused with the limit named, and
// the run is not committed.
func TestCarryIsBounded(t *testing.T) {
	db, _ := open(t)
	db.EnsureGroup("pcap.sz", "stage-a", Earliest)
	db.CommitBlock(mk(1, "aa"))
	res, _, ok, err := db.ReserveNext("pcap.sz", "stage-a", "r", time.Minute, time.Minute, nil)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	run := Run{Group: "stage-a", Reserver: "r", Inputs: res.Blocks,
		Carry: &CarryUpdate{Instance: res.Blocks[0].Instance, Seq: res.Blocks[0].Seq, State: make([]byte, MaxCarry+1)}}
	if _, err := db.CommitRun(run); err == nil || !strings.Contains(err.Error(), "over 67108864") {
		t.Fatalf("a carry over MaxCarry: %v", err)
	}
	if _, ok, _ := db.GetCarry("stage-a", res.Blocks[0].Instance); ok {
		t.Error("the refused run's carry was stored")
	}
	run.Carry.State = []byte("small")
	if _, err := db.CommitRun(run); err != nil {
		t.Fatalf("the run with a carry within the limit: %v", err)
	}
}
