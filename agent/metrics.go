package agent

import (
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// OldestReady returns the age of the oldest finished block not yet
// acknowledged (0 when the spool is empty): how far behind shipping is.
func (s *Spool) OldestReady() time.Duration {
	ready, err := s.Ready()
	if err != nil || len(ready) == 0 {
		return 0
	}
	oldest := time.Time{}
	for _, r := range ready {
		if fi, err := os.Stat(r.Path); err == nil && (oldest.IsZero() || fi.ModTime().Before(oldest)) {
			oldest = fi.ModTime()
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest)
}

// registerMetrics exposes the run's counters on reg.
func registerMetrics(reg prometheus.Registerer, st Stats, spool *Spool, spoolMax int64, sampleRate uint32, live *LiveStats, labels prometheus.Labels) error {
	if live != nil {
		if err := reg.Register(newLiveCollector(live, labels)); err != nil {
			return err
		}
	}
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "plumb_agent", Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f()) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "plumb_agent", Name: name, Help: help, ConstLabels: labels}, f)
	}
	for _, c := range []prometheus.Collector{
		counter("packets_total", "Packets cut into blocks.", st.Cut.Packets.Load),
		counter("pcap_bytes_total", "Uncompressed pcap bytes cut into blocks.", st.Cut.BytesIn.Load),
		counter("blocks_cut_total", "Blocks finished in the spool.", st.Cut.Blocks.Load),
		counter("blocks_acked_total", "Blocks the server acknowledged (stored or duplicate).", st.Ship.Acked.Load),
		counter("blocks_duplicate_total", "Blocks the server already held.", st.Ship.Duplicates.Load),
		counter("upload_failures_total", "Failed upload attempts.", st.Ship.Failures.Load),
		counter("packets_dropped_total", "Packets of live sources dropped while the spool was full.", st.Cut.Dropped.Load),
		counter("packets_filtered_total", "Packets of files and stdin that --filter did not keep (a live capture's are dropped in the kernel).", st.Cut.Filtered.Load),
		counter("packets_sampled_out_total", "Packets --sample 1/N did not keep (their address pair was not one of those kept).", st.Cut.SampledOut.Load),
		gauge("sample_rate", "The N of --sample 1/N (1: every packet kept): counts of the blocks' rows scale back to totals by it.", func() float64 { return float64(max(sampleRate, 1)) }),
		counter("source_errors_total", "Sources that could not be read in full.", st.Cut.BadSources.Load),
		gauge("spool_bytes", "Bytes of finished blocks waiting for acknowledgement.", func() float64 { return float64(spool.Bytes()) }),
		gauge("spool_max_bytes", "The most bytes the spool holds (--spool-max; 0: no bound): full, files wait and live sources drop packets.", func() float64 { return float64(spoolMax) }),
		counter("spool_state_bytes_written_total", "Bytes the spool wrote to its state (journal and snapshots).", spool.StateBytesWritten),
		counter("lost_bytes_total", "Bytes of blocks cut short by crashes from sources that cannot be read again.", spool.LostBytes),
		gauge("oldest_unshipped_seconds", "Age of the oldest block not yet acknowledged.", func() float64 { return spool.OldestReady().Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
