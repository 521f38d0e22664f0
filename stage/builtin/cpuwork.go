package builtin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/plumb-dev/plumb/stage"
)

// registerCPUWork adds cpuwork, a stage of known CPU cost for load tests
// and benchmarks of the scheduler.
func registerCPUWork(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "cpuwork",
		Doc: "Copies a block through while hashing it ?rounds=N times (default 1); a block whose first byte is 'H' " +
			"is hashed ?heavy=M times as often (default 1). A stage of real, known CPU cost for load tests.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args, "rounds", "heavy"); err != nil {
				return nil, err
			}
			w := CPUWork{Rounds: 1, Heavy: 1}
			for key, dst := range map[string]*int{"rounds": &w.Rounds, "heavy": &w.Heavy} {
				if v := args.Get(key); v != "" {
					n, err := strconv.Atoi(v)
					if err != nil || n < 1 || n > 1000 {
						return nil, fmt.Errorf("%s=%q: want a whole number from 1 to 1000", key, v)
					}
					*dst = n
				}
			}
			return w, nil
		},
	})
}

// CPUWork hashes its input Rounds times (Rounds×Heavy for heavy blocks)
// and copies it through.
type CPUWork struct {
	Rounds, Heavy int
}

// Run implements stage.Builtin.
func (w CPUWork) Run(ctx context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	br := bufio.NewReaderSize(in, 1<<20)
	rounds := w.Rounds
	if head, _ := br.Peek(1); len(head) == 1 && head[0] == 'H' {
		rounds *= w.Heavy
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		n, err := io.ReadFull(br, buf)
		for range rounds {
			h.Write(buf[:n])
		}
		if _, werr := out.Write(buf[:n]); werr != nil {
			return werr
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
