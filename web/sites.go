package web

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/state"
)

// siteSpan is how many of a site's latest sequence numbers the Sites
// page reads: its cost per refresh, whatever the history.
const siteSpan = 256

// defaultSilentAfter is the least time without a block after which a
// site is called silent, as the PlumbSiteSilent alert rule has it; a site
// shipping hourly blocks is called silent after three of its intervals.
const defaultSilentAfter = 15 * time.Minute

// WithSilentAfter sets the least time without a block after which the
// Sites page calls a site silent (15 minutes when d is zero).
func (s *Server) WithSilentAfter(d time.Duration) *Server {
	s.silentAfter = d
	return s
}

// SiteRow is a site (an agent's instance) as the Sites page shows it.
type SiteRow struct {
	state.Site
	// Age is the time since its newest block arrived; Interval the mean
	// time between the arrivals of its latest blocks.
	AgeNS      int64 `json:"age_ns"`
	IntervalNS int64 `json:"interval_ns"`
	// BytesPerSecond is the arrival rate now: its latest blocks' bytes
	// from the first one's arrival to now, and 0 once it is silent (the
	// rate of its last blocks showed a site idle for ten minutes at
	// 33 MiB/s).
	BytesPerSecond float64 `json:"bytes_per_second"`
	// Silent says no block came for three intervals, and at least for
	// the server's --site-silent-after (15 minutes); Ended that the
	// site's capture ended (its last block is final: a finished import),
	// which is never silent.
	Silent bool `json:"silent"`
	Ended  bool `json:"ended"`
}

// sites lists the sites shipping to each source queue (one no stage
// writes) the user may read.
func (s *Server) sites(w http.ResponseWriter, r *http.Request) {
	qs, err := s.db.Queues()
	if err != nil {
		reply(w, nil, err)
		return
	}
	derived := map[string]bool{}
	if g := s.graphOrNil(); g != nil {
		for _, n := range g.Stages {
			for _, q := range n.Outputs {
				derived[q] = true
			}
		}
	}
	now := time.Now()
	out := []SiteRow{}
	for _, q := range qs {
		if derived[q.Name] || !s.may(r, auth.Read, q.Name) {
			continue
		}
		insts, err := s.db.Instances(q.Name)
		if err != nil {
			reply(w, nil, err)
			return
		}
		for _, inst := range insts {
			site, err := s.db.SiteRecent(q.Name, inst, siteSpan)
			if err != nil {
				reply(w, nil, err)
				return
			}
			out = append(out, siteRow(site, now, cmp.Or(s.silentAfter, defaultSilentAfter)))
		}
	}
	slices.SortFunc(out, func(a, b SiteRow) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.Site.Site, b.Site.Site))
	})
	reply(w, out, nil)
}

func siteRow(site state.Site, now time.Time, silentAfter time.Duration) SiteRow {
	row := SiteRow{Site: site}
	if site.Last == nil {
		return row
	}
	row.AgeNS = int64(now.Sub(site.Last.Arrived))
	span := site.Last.Arrived.Sub(site.FirstArrived)
	if site.Blocks > 1 && span > 0 {
		row.IntervalNS = int64(span) / int64(site.Blocks-1)
	}
	row.Ended = site.Last.Final
	row.Silent = !row.Ended && time.Duration(row.AgeNS) > max(3*time.Duration(row.IntervalNS), silentAfter)
	if since := now.Sub(site.FirstArrived); site.Blocks > 1 && since > 0 && !row.Silent {
		row.BytesPerSecond = float64(site.Bytes) / since.Seconds()
	}
	return row
}
