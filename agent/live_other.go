//go:build !linux

package agent

import (
	"errors"
	"log/slog"
)

// LiveSource is only available on Linux (AF_PACKET).
func LiveSource(cfg LiveConfig, stats *LiveStats, log *slog.Logger) (Source, error) {
	return Source{}, errors.New("live capture needs Linux (AF_PACKET); pipe tcpdump -w - into the agent instead")
}
