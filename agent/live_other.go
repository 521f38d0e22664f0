//go:build !linux

package agent

import (
	"fmt"
	"log/slog"
)

// LiveSource is only available on Linux (AF_PACKET).
func LiveSource(iface, filter string, log *slog.Logger) (Source, error) {
	return Source{}, fmt.Errorf("live capture from %s needs Linux (AF_PACKET); pipe tcpdump -w - into the agent instead", iface)
}
