package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/state"
)

// counters are the Flight service's own, one set per service, registered
// on the registry its configuration names (none: counted, not exported).
type counters struct {
	// uploads counts uploaded blocks by result: stored, duplicate, staged
	// (a worker's output) or refused.
	uploads *prometheus.CounterVec
	// readEstimate is each block read's actual duration over the
	// admission estimate it was granted with: above 1, reads take longer
	// than the deadline scheduler thinks.
	readEstimate prometheus.Histogram
	// authFailures counts failed logins and refused credentials.
	authFailures prometheus.Counter
	// panics counts panics recovered in Flight calls: each is a bug.
	panics prometheus.Counter
}

func newCounters() *counters {
	return &counters{
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plumb_uploads_total",
			Help: "Blocks uploaded, by result: stored, duplicate, staged (a worker's output) or refused."}, []string{"result"}),
		readEstimate: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "plumb_read_estimate_ratio",
			Help:    "A block read's actual transfer time divided by the admission estimate (safety factor included); above 1 the estimate was too low.",
			Buckets: []float64{0.125, 0.25, 0.5, 0.75, 1, 1.5, 2, 4, 8, 16}}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "plumb_auth_failures_total",
			Help: "Calls refused for a failed login or a bad, expired or revoked credential."}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Name: "plumb_flight_panics_total",
			Help: "Panics recovered in Flight calls (each a bug; the log says where)."}),
	}
}

func (c *counters) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.uploads, c.readEstimate, c.authFailures, c.panics}
}

var (
	faultyDesc  = prometheus.NewDesc("plumb_queue_faulty_blocks", "Blocks of a queue set aside as FAULTY for a consumer (stage or group).", []string{"queue", "consumer"}, nil)
	backlogDesc = prometheus.NewDesc("plumb_consumer_backlog_blocks",
		"Blocks a consumer group (or a stage, by name) is owed and could take now; a window stage's blocks held for windows not yet due are in plumb_stage_window_waiting_blocks instead.",
		[]string{"queue", "consumer"}, nil)
)

// queueCollector reports, at each scrape, what the metadata holds per
// queue and per site: what an operator watches to see a site fall silent
// or a queue grow.
type queueCollector struct {
	db      *state.DB
	stageOf func(group string) (string, bool) // nil without an engine
	waiting func(group string) int64          // a window stage's blocks held for windows; nil without an engine
	// derived lists the queues stages produce, which get no per-site
	// series: their "sites" are their inputs' (or, for window outputs,
	// windows numbered by index), so a silent agent paged once per
	// derived queue and window numbering looked like gaps.
	derived func() map[string]bool // nil without an engine
}

// consumer names a group as people know it: a stage by its name.
func (c queueCollector) consumer(group string) string {
	if c.stageOf != nil {
		if name, ok := c.stageOf(group); ok {
			return name
		}
	}
	return group
}

var (
	queueBlocksDesc = prometheus.NewDesc("plumb_queue_blocks", "Blocks a queue holds.", []string{"queue"}, nil)
	queueBytesDesc  = prometheus.NewDesc("plumb_queue_bytes", "Bytes of the blocks a queue holds.", []string{"queue"}, nil)
	siteSeqDesc     = prometheus.NewDesc("plumb_site_last_seq", "The highest sequence number a site (instance) has stored in a queue.", []string{"queue", "site"}, nil)
	siteArrivalDesc = prometheus.NewDesc("plumb_site_last_arrival_timestamp_seconds",
		"When the block with a site's highest sequence number arrived (Unix time); a site whose value stops moving is silent.", []string{"queue", "site"}, nil)
	siteTimeDesc = prometheus.NewDesc("plumb_site_last_event_timestamp_seconds",
		"The event time of a site's block with the highest sequence number (Unix time).", []string{"queue", "site"}, nil)
	siteEndedDesc = prometheus.NewDesc("plumb_site_ended",
		"1 when a site's capture in a queue has ended: its block with the highest sequence number is final (an import's last, or the server's end of a silent site); the silent-site alert leaves it alone.",
		[]string{"queue", "site"}, nil)
	siteMissingDesc = prometheus.NewDesc("plumb_site_missing_blocks",
		"Sequence numbers missing among a site's latest 1024 in a queue (between the lowest stored there and the highest): a gap that stays is lost data.",
		[]string{"queue", "site"}, nil)
)

// missingSpan is how many of a site's latest sequence numbers the gap
// metric looks at: a scrape reads that many keys per site, not history.
const missingSpan = 1024

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueBlocksDesc, queueBytesDesc, siteSeqDesc, siteArrivalDesc, siteTimeDesc, siteEndedDesc, siteMissingDesc, faultyDesc, backlogDesc} {
		ch <- d
	}
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	qs, err := c.db.Queues()
	if err != nil {
		return
	}
	var derived map[string]bool
	if c.derived != nil {
		derived = c.derived()
	}
	for _, q := range qs {
		ch <- prometheus.MustNewConstMetric(queueBlocksDesc, prometheus.GaugeValue, float64(q.Blocks), q.Name)
		ch <- prometheus.MustNewConstMetric(queueBytesDesc, prometheus.GaugeValue, float64(q.Bytes), q.Name)
		// Counted from each group's floor: a scrape costs what is open,
		// not the queue's history.
		if names, err := c.db.GroupNames(q.Name); err == nil {
			for _, g := range names {
				backlog, faulty, err := c.db.Owed(q.Name, g)
				if err != nil {
					continue
				}
				if c.waiting != nil {
					backlog -= min(c.waiting(g), backlog)
				}
				name := c.consumer(g)
				ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(backlog), q.Name, name)
				ch <- prometheus.MustNewConstMetric(faultyDesc, prometheus.GaugeValue, float64(faulty), q.Name, name)
			}
		}
		if derived[q.Name] {
			continue
		}
		sites, err := c.db.Instances(q.Name)
		if err != nil {
			continue
		}
		for _, site := range sites {
			seq, ok, err := c.db.LastSeq(q.Name, site)
			if err != nil || !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(siteSeqDesc, prometheus.GaugeValue, float64(seq), q.Name, site)
			if missing, err := c.db.MissingRecent(q.Name, site, seq, missingSpan); err == nil {
				ch <- prometheus.MustNewConstMetric(siteMissingDesc, prometheus.GaugeValue, float64(missing), q.Name, site)
			}
			if b, err := c.db.Lookup(block.ID{Queue: q.Name, Instance: site, Seq: seq}); err == nil {
				ch <- prometheus.MustNewConstMetric(siteArrivalDesc, prometheus.GaugeValue, float64(b.Arrived.UnixNano())/1e9, q.Name, site)
				ch <- prometheus.MustNewConstMetric(siteTimeDesc, prometheus.GaugeValue, float64(b.Time.UnixNano())/1e9, q.Name, site)
				ended := 0.0
				if b.Final {
					ended = 1
				}
				ch <- prometheus.MustNewConstMetric(siteEndedDesc, prometheus.GaugeValue, ended, q.Name, site)
			}
		}
	}
}

var (
	storeFreeDesc = prometheus.NewDesc("plumb_store_free_bytes",
		"Free bytes where the blob store keeps blocks (a directory store's file system; absent when the store cannot tell).", nil, nil)
	storeUsedDesc = prometheus.NewDesc("plumb_store_used_bytes", "Bytes of the blocks the store holds.", nil, nil)
	storeKeepDesc = prometheus.NewDesc("plumb_store_min_free_bytes",
		"The free bytes the server keeps (--min-free): below it uploads are refused.", nil, nil)
)

// storeCollector reports the store's space at each scrape: what an alert
// on a filling store watches.
type storeCollector struct{ s *space }

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeFreeDesc
	ch <- storeUsedDesc
	ch <- storeKeepDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	c.s.measure()
	free, used := c.s.free, c.s.used
	c.s.mu.Unlock()
	if free >= 0 {
		ch <- prometheus.MustNewConstMetric(storeFreeDesc, prometheus.GaugeValue, float64(free))
	}
	ch <- prometheus.MustNewConstMetric(storeUsedDesc, prometheus.GaugeValue, float64(used))
	ch <- prometheus.MustNewConstMetric(storeKeepDesc, prometheus.GaugeValue, float64(c.s.minFree))
}

var (
	metaBytesDesc = prometheus.NewDesc("plumb_metadata_file_bytes", "Size of the metadata file (meta.db).", nil, nil)
	metaFreeDesc  = prometheus.NewDesc("plumb_metadata_free_pages",
		"Pages of the metadata file a later commit may reuse (free, or freed while a reader may still see them).", nil, nil)
	metaWritesDesc = prometheus.NewDesc("plumb_metadata_page_writes_total",
		"Writes of metadata commits since the server started: one per run of dirty pages and one per commit's meta page.", nil, nil)
	metaWriteSecondsDesc = prometheus.NewDesc("plumb_metadata_write_seconds_total",
		"Time metadata commits spent writing their pages, fdatasync included, since the server started; its rate over the rate of commits going up as history grows is the file getting slower.", nil, nil)
	metaSpillSecondsDesc = prometheus.NewDesc("plumb_metadata_spill_seconds_total",
		"Time metadata commits spent laying out changed nodes as pages, since the server started.", nil, nil)
)

// metaCollector reports the metadata file's size and its commits' cost
// at each scrape.
type metaCollector struct{ db *state.DB }

func (c metaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{metaBytesDesc, metaFreeDesc, metaWritesDesc, metaWriteSecondsDesc, metaSpillSecondsDesc} {
		ch <- d
	}
}

func (c metaCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.db.FileStats()
	ch <- prometheus.MustNewConstMetric(metaBytesDesc, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(metaFreeDesc, prometheus.GaugeValue, float64(s.FreePages))
	ch <- prometheus.MustNewConstMetric(metaWritesDesc, prometheus.CounterValue, float64(s.PageWrites))
	ch <- prometheus.MustNewConstMetric(metaWriteSecondsDesc, prometheus.CounterValue, s.WriteTime.Seconds())
	ch <- prometheus.MustNewConstMetric(metaSpillSecondsDesc, prometheus.CounterValue, s.SpillTime.Seconds())
}
