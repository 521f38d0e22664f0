package dnsrec

import (
	"bytes"
	"encoding/gob"
	"fmt"

	"github.com/plumb-dev/plumb/dns/dnstcp"
	"github.com/plumb-dev/plumb/pcap/netpkt"
)

// carried is what an Extractor hands from one block of a site to the
// next: datagrams missing fragments and TCP streams holding part of a
// message. Counters are per block and are not carried.
type carried struct {
	Version int
	Frag    netpkt.DefragState
	TCP     dnstcp.State
}

const stateVersion = 1

// SaveState returns what the extractor holds between blocks, so the next
// block of the same capture can go on with LoadState: a message or
// datagram cut by a block boundary is then found once, in the block that
// completes it, as in the uncut capture. Call it instead of Flush at the
// end of a block.
func (x *Extractor) SaveState() ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(carried{Version: stateVersion, Frag: x.frag.State(), TCP: x.tcp.State()}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LoadState goes on from what SaveState returned for the previous block.
// Empty state is a fresh start.
func (x *Extractor) LoadState(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	var c carried
	if err := gob.NewDecoder(bytes.NewReader(state)).Decode(&c); err != nil {
		return fmt.Errorf("DNS extraction state: %w", err)
	}
	if c.Version != stateVersion {
		return fmt.Errorf("DNS extraction state of version %d; this server reads %d", c.Version, stateVersion)
	}
	x.frag.Restore(c.Frag)
	x.tcp.Restore(c.TCP)
	return nil
}
