package dnspair

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"time"
)

// saved is what SaveState writes: the waiting queries in arrival order
// and the packet clock.
type saved struct {
	Version int
	Clock   time.Time
	Keys    []Key
	Queries []Query
}

const stateVersion = 1

// SaveState returns the waiting queries, so the next block of the same
// capture can go on with LoadState. Call it instead of Flush at the end
// of a block.
func (p *Pairer) SaveState() ([]byte, error) {
	s := saved{Version: stateVersion, Clock: p.clock, Keys: make([]Key, 0, p.n), Queries: make([]Query, 0, p.n)}
	for e := p.head; e != nil; e = e.next {
		s.Keys = append(s.Keys, e.key)
		s.Queries = append(s.Queries, e.q)
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LoadState goes on from what SaveState returned for the previous block;
// empty state is a fresh start. Queries past MaxPending are evicted as
// Add would have.
func (p *Pairer) LoadState(state []byte) error {
	if len(state) == 0 {
		return nil
	}
	var s saved
	if err := gob.NewDecoder(bytes.NewReader(state)).Decode(&s); err != nil {
		return fmt.Errorf("DNS pairing state: %w", err)
	}
	if s.Version != stateVersion {
		return fmt.Errorf("DNS pairing state of version %d; this server reads %d", s.Version, stateVersion)
	}
	if len(s.Keys) != len(s.Queries) {
		return fmt.Errorf("DNS pairing state: %d keys for %d queries", len(s.Keys), len(s.Queries))
	}
	p.clock = s.Clock
	for i := range s.Keys {
		if p.n >= p.maxPending() {
			p.drop(p.head, true)
		}
		p.push(&entry{key: s.Keys[i], q: s.Queries[i]})
	}
	return nil
}
