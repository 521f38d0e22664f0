package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// report logs a summary every cfg.Summary and, for imports, draws a
// progress line every second, until ctx ends.
func report(ctx context.Context, cfg Config, spool *Spool, st Stats, log *slog.Logger) {
	every := cfg.Summary
	if every <= 0 {
		every = time.Minute
	}
	var total int64
	if cfg.Progress != nil {
		total = cfg.totalSourceBytes
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastSummary, lastLine := start, start
	tty := isTerminal(cfg.Progress)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			// On a terminal the line is redrawn each second; into a log or
			// a pipe a whole line is written every 10 s instead.
			if cfg.Progress != nil && (tty || now.Sub(lastLine) >= 10*time.Second) {
				lastLine = now
				progressLine(cfg.Progress, st, spool, total, start)
			}
			if now.Sub(lastSummary) >= every {
				lastSummary = now
				log.Info("agent summary",
					"packets", st.Cut.Packets.Load(), "blocks_cut", st.Cut.Blocks.Load(),
					"blocks_acked", st.Ship.Acked.Load(), "spool_bytes", spool.Bytes(),
					"dropped", st.Cut.Dropped.Load(), "kernel_dropped", cfg.Live.KernelDropped(), "filtered", st.Cut.Filtered.Load(), "sampled_out", st.Cut.SampledOut.Load(), "upload_failures", st.Ship.Failures.Load(),
					"lost_bytes", spool.LostBytes(), "oldest_unshipped", spool.OldestReady().Round(time.Second))
			}
		}
	}
}

// isTerminal reports whether w is a terminal, where a progress line may
// be redrawn in place with \r.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && f.Name() != os.DevNull
}

// progressLine draws one line: bytes read of the total, blocks cut and
// acknowledged, rate and ETA. On a terminal it redraws the line in place
// and leaves the cursor on it; elsewhere it writes a whole line.
func progressLine(w io.Writer, st Stats, spool *Spool, total int64, start time.Time) {
	read := st.Cut.SourceBytes.Load()
	line := fmt.Sprintf("%s read", human(read))
	if total > 0 {
		line += fmt.Sprintf(" of %s (%3.0f%%)", human(total), 100*float64(read)/float64(total))
	}
	line += fmt.Sprintf(", %d blocks cut, %d acknowledged", st.Cut.Blocks.Load(), st.Ship.Acked.Load())
	if !start.IsZero() {
		secs := time.Since(start).Seconds()
		rate := float64(read) / secs
		line += fmt.Sprintf(", %s/s", human(int64(rate)))
		if total > 0 && rate > 0 && read < total {
			eta := time.Duration(float64(total-read) / rate * float64(time.Second))
			line += fmt.Sprintf(", ETA %s", eta.Round(time.Second))
		}
	}
	if isTerminal(w) {
		fmt.Fprintf(w, "\r%-100s", line)
	} else {
		fmt.Fprintln(w, line)
	}
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
