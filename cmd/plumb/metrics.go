package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// processMetrics are the collectors every Plumb process with metrics
// registers besides its own: the Go runtime's, the process's and
// plumb_build_info.
func processMetrics() []prometheus.Collector {
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo()}
}

// buildInfo is plumb_build_info: 1, labelled with what versionLine says.
func buildInfo() prometheus.Collector {
	version, revision := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "plumb_build_info", Help: "The running build: 1, labelled with its version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()}})
	g.Set(1)
	return g
}
