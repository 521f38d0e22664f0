package builtin

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/plumb-dev/plumb/dns/dnsmetrics"
	"github.com/plumb-dev/plumb/stage"
)

func registerDNSMetrics(reg *stage.Registry) {
	reg.Add(stage.Factory{
		Name: "dnsmetrics",
		Doc: "Counts DNS records (builtin:dns) or transactions (builtin:dnspairs, which add latency) into the server's " +
			"Prometheus metrics per site: plumb_dns_queries_total{transport,qtype}, plumb_dns_responses_total{rcode}, " +
			"plumb_dns_response_size_bytes, plumb_dns_latency_seconds, plumb_dns_malformed_total and " +
			"plumb_dns_top_domain_queries. A block is counted when its run is committed, so once. Writes no output.",
		New: func(args url.Values) (stage.Builtin, error) {
			if err := stage.StrictArgs(args); err != nil {
				return nil, err
			}
			return DNSMetrics{}, nil
		},
	})
}

// DNSMetrics counts a block of DNS rows into its run's tally.
type DNSMetrics struct{}

// Run implements stage.Builtin.
func (DNSMetrics) Run(ctx context.Context, sin stage.Input, in io.Reader, _ io.Writer) error {
	name := sin.Block
	if name.Instance == "" {
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
		return fmt.Errorf("%w: %v", stage.ErrMalformed, err)
	}
	for k, n := range t {
		sin.Tally.Add(k, n)
	}
	return nil
}
