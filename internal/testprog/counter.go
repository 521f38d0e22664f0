// Package testprog holds programs tests run as child processes: their
// own binary, re-executed with an environment variable set.
package testprog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/plumb-dev/plumb/pcap"
)

// CounterEnv, set to 1, makes a test binary run CounterMain.
const CounterEnv = "PLUMB_TEST_COUNTER"

// CounterMain is a stream-stage program for tests: it counts the packets
// of its input capture and checkpoints the count every two blocks, as
// the stream protocol asks (block lines on fd 3, checkpoints on fd 4,
// state in $PLUMB_STATE). Tests run their own binary as it when
// CounterEnv is set.
func CounterMain() {
	var st struct{ Packets, Blocks int }
	if s := os.Getenv("PLUMB_STATE"); s != "" {
		json.Unmarshal([]byte(s), &st)
	}
	base := st
	lines := make(chan [2]int, 1024) // seq, packets
	go func() {
		sc := bufio.NewScanner(os.NewFile(3, "blocks"))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			seq, _ := strconv.Atoi(f[1])
			n, _ := strconv.Atoi(f[2])
			lines <- [2]int{seq, n}
		}
		close(lines)
	}()
	ck := os.NewFile(4, "checkpoints")
	var read atomic.Int64 // packets read since start
	go func() {
		r, _, err := pcap.NewReader(os.Stdin)
		if err != nil {
			return
		}
		for {
			if _, _, err := r.Next(); err != nil {
				return
			}
			read.Add(1)
		}
	}()
	boundary, blocks := 0, 0 // through the last finished block
	for l := range lines {
		boundary += l[1]
		for read.Load() < int64(boundary) {
			time.Sleep(time.Millisecond)
		}
		blocks++
		if (base.Blocks+blocks)%2 == 0 {
			b, _ := json.Marshal(struct{ Packets, Blocks int }{base.Packets + boundary, base.Blocks + blocks})
			fmt.Fprintf(ck, "checkpoint %d %s\n", l[0], b)
		}
	}
}
