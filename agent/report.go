package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
	lastSummary := start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if cfg.Progress != nil {
				progressLine(cfg.Progress, st, spool, total, start)
			}
			if now.Sub(lastSummary) >= every {
				lastSummary = now
				log.Info("agent summary",
					"packets", st.Cut.Packets.Load(), "blocks_cut", st.Cut.Blocks.Load(),
					"blocks_acked", st.Ship.Acked.Load(), "spool_bytes", spool.Bytes(),
					"dropped", st.Cut.Dropped.Load(), "upload_failures", st.Ship.Failures.Load(),
					"lost_bytes", spool.LostBytes(), "oldest_unshipped", spool.OldestReady().Round(time.Second))
			}
		}
	}
}

// progressLine draws one line: bytes read of the total, blocks cut and
// acknowledged, rate and ETA.
func progressLine(w io.Writer, st Stats, spool *Spool, total int64, start time.Time) {
	read := st.Cut.SourceBytes.Load()
	line := fmt.Sprintf("\r%s read", human(read))
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
	fmt.Fprintf(w, "%-100s", line)
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
