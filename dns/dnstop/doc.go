// Package dnstop ranks what DNS traffic is made of — requesters, their
// networks, ASes and countries, query names, registered domains and
// rcodes — in memory bounded by the number of counters, whatever the
// traffic's cardinality (Summary), and exports each site's top values
// as Prometheus series whose number is bounded too.
//
// Ranking goes in two steps, as dnsmetrics counts: a run ranks a block's
// rows (Counter) and writes its top rows and a tally; a Collector merges
// the tallies of committed runs per site and window of event time.
package dnstop
