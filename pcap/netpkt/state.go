package netpkt

import (
	"net/netip"
	"time"
)

// DefragState is what a Defrag holds between two parts of one capture:
// the datagrams still missing fragments.
type DefragState struct {
	Datagrams  []DatagramState
	LastExpire time.Time
}

// DatagramState is one datagram being put together.
type DatagramState struct {
	Src, Dst    netip.Addr
	ID          uint32
	Proto       uint8
	First       time.Time
	Head        time.Time // when the first fragment came; zero before
	Pieces      []PieceState
	Total, Size int
}

// PieceState is one fragment's bytes at their offset.
type PieceState struct {
	Off  int
	Data []byte
}

// State returns what the Defrag holds; it shares no memory with it.
func (d *Defrag) State() DefragState {
	st := DefragState{LastExpire: d.lastExpire}
	for k, dg := range d.pending {
		ds := DatagramState{Src: k.src, Dst: k.dst, ID: k.id, Proto: k.proto, First: dg.first, Head: dg.head, Total: dg.total, Size: dg.size}
		for _, pc := range dg.pieces {
			ds.Pieces = append(ds.Pieces, PieceState{pc.off, append([]byte(nil), pc.data...)})
		}
		st.Datagrams = append(st.Datagrams, ds)
	}
	return st
}

// Restore replaces what the Defrag holds with st.
func (d *Defrag) Restore(st DefragState) {
	d.pending, d.bytes = nil, 0
	d.init()
	d.lastExpire = st.LastExpire
	for _, ds := range st.Datagrams {
		dg := &datagram{first: ds.First, head: ds.Head, total: ds.Total, size: ds.Size}
		for _, pc := range ds.Pieces {
			dg.pieces = append(dg.pieces, piece{pc.Off, pc.Data})
		}
		d.pending[fragKey{ds.Src, ds.Dst, ds.ID, ds.Proto}] = dg
		d.bytes += ds.Size
	}
}
