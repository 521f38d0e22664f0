package builtin

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/pcap/dnsmetrics"
)

func registerDNSMetrics(reg *engine.Registry) {
	reg.Add(engine.Factory{
		Name: "dnsmetrics",
		Doc: "Counts DNS records (builtin:dns) or transactions (builtin:dnspairs, which add latency) into the server's " +
			"Prometheus metrics per site: plumb_dns_queries_total{transport,qtype}, plumb_dns_responses_total{rcode}, " +
			"plumb_dns_response_size_bytes, plumb_dns_latency_seconds, plumb_dns_malformed_total and " +
			"plumb_dns_top_domain_queries. A block is counted when its run is committed, so once. Writes no output.",
		New: func(args url.Values) (engine.Builtin, error) {
			if err := engine.StrictArgs(args); err != nil {
				return nil, err
			}
			return DNSMetrics{}, nil
		},
	})
}

// DNSMetrics counts a block of DNS rows into its run's tally.
type DNSMetrics struct{}

// Run implements engine.Builtin.
func (DNSMetrics) Run(ctx context.Context, in io.Reader, _ io.Writer) error {
	name, ok := engine.BlockOf(ctx)
	if !ok {
		return fmt.Errorf("builtin:dnsmetrics counts per site: it runs on blocks")
	}
	var recs []arrow.RecordBatch
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	err := eachBatch(ctx, in, func(*arrow.Schema) error { return nil }, func(_ int, rec arrow.RecordBatch) error {
		rec.Retain()
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return err
	}
	// Counted whole or not at all: a run that fails part way adds nothing.
	t := map[string]int64{}
	if err := dnsmetrics.Count(name.Instance, recs, func(k string, n int64) { t[k] += n }); err != nil {
		return fmt.Errorf("%w: %v", engine.ErrMalformed, err)
	}
	if tally := engine.TallyOf(ctx); tally != nil {
		for k, n := range t {
			tally.Add(k, n)
		}
	}
	return nil
}
