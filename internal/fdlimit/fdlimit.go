// Package fdlimit fits a listener's cap of connections to the process's
// open-files limit, so that a flood of connections never leaves the
// process without a descriptor for its own files (a spool block, the
// metadata, a blob).
package fdlimit

import (
	"log/slog"
	"syscall"
)

// HTTPConns bounds a process's dashboard and /metrics connections at
// once (then fitted by Fit): browsers and scrapers need a few each; more
// wait in the kernel's queue.
const HTTPConns = 256

// Low is the open-files limit under which a listening process warns.
const Low = 4096

// Fit returns want, or a quarter of the open-files limit when that is
// less, and logs why; it warns when the limit itself is below Low. (Go
// raises the soft limit to the hard one at start; systemd's default
// hard limit is 512 Ki, a login shell's often 1 Ki or 4 Ki.) what names
// the listener and flag names the flag that sets want, for the log.
func Fit(want int, what, flag string, log *slog.Logger) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return want
	}
	if lim.Cur < Low {
		log.Warn("the open-files limit is low for "+what+"; raise it (LimitNOFILE= in the unit, ulimit -n)", "limit", lim.Cur)
	}
	if budget := max(int(min(lim.Cur/4, 1<<20)), 1); want > budget {
		log.Warn(what+": connections capped at a quarter of the open-files limit", "max_conns", budget, flag, want, "limit", lim.Cur)
		return budget
	}
	return want
}
