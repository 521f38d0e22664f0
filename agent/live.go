package agent

import (
	"strconv"

	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// LiveConfig says what to capture live.
type LiveConfig struct {
	// Interfaces to capture from; "any" is every interface. With one
	// interface the blocks have its framing (Ethernet, raw IP); with
	// several, or any, they are Linux cooked v2 (SLL2) captures, as
	// tcpdump -i any writes, which name each packet's interface.
	Interfaces []string
	// Filter is a capture filter (tcpdump syntax) attached to every socket.
	Filter string
	// Fanout is how many readers share each interface (PACKET_FANOUT by
	// flow hash, so a flow stays on one reader); 1 when 0.
	Fanout int
	// Snaplen cuts packets to this many bytes (262144 when 0).
	Snaplen int
	// Promisc puts the interfaces in promiscuous mode.
	Promisc bool
	// BufferSize is each reader's ring in bytes (32 MiB when 0).
	BufferSize int
}

// LiveStats counts what the kernel and the readers saw, per interface.
type LiveStats struct {
	mu    sync.Mutex
	ifs   map[string]*IfaceStats
	order []string
}

// IfaceStats are one interface's counts.
type IfaceStats struct {
	Packets atomic.Int64 // packets the readers took from the ring
	// KernelDropped are packets the kernel dropped because the ring was
	// full (the sockets' PACKET_STATISTICS, summed over readers).
	KernelDropped atomic.Int64
	// Readers counts packets per fanout reader.
	Readers []atomic.Int64
}

// Iface returns an interface's counts, made on first use.
func (s *LiveStats) Iface(name string, readers int) *IfaceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ifs == nil {
		s.ifs = map[string]*IfaceStats{}
	}
	st, ok := s.ifs[name]
	if !ok {
		st = &IfaceStats{Readers: make([]atomic.Int64, readers)}
		s.ifs[name] = st
		s.order = append(s.order, name)
		sort.Strings(s.order)
	}
	return st
}

// Each calls fn with each interface's counts, by name.
func (s *LiveStats) Each(fn func(name string, st *IfaceStats)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	names := append([]string(nil), s.order...)
	s.mu.Unlock()
	for _, n := range names {
		fn(n, s.Iface(n, 0))
	}
}

// KernelDropped sums the kernel's drops over the interfaces.
func (s *LiveStats) KernelDropped() int64 {
	var n int64
	s.Each(func(_ string, st *IfaceStats) { n += st.KernelDropped.Load() })
	return n
}

// liveCollector exports LiveStats per interface.
type liveCollector struct {
	s                        *LiveStats
	labels                   prometheus.Labels
	dropped, packets, reader *prometheus.Desc
}

func newLiveCollector(s *LiveStats, labels prometheus.Labels) *liveCollector {
	return &liveCollector{s: s, labels: labels,
		dropped: prometheus.NewDesc("plumb_agent_kernel_dropped_packets_total",
			"Packets the kernel dropped on an interface because the capture ring was full (the sockets' own statistics).", []string{"interface"}, labels),
		packets: prometheus.NewDesc("plumb_agent_captured_packets_total",
			"Packets read from an interface's capture rings.", []string{"interface"}, labels),
		reader: prometheus.NewDesc("plumb_agent_reader_packets_total",
			"Packets each fanout reader of an interface read.", []string{"interface", "reader"}, labels),
	}
}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.dropped
	ch <- c.packets
	ch <- c.reader
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.Each(func(name string, st *IfaceStats) {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.KernelDropped.Load()), name)
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(st.Packets.Load()), name)
		for i := range st.Readers {
			ch <- prometheus.MustNewConstMetric(c.reader, prometheus.CounterValue, float64(st.Readers[i].Load()), name, strconv.Itoa(i))
		}
	})
}
