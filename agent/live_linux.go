//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/afpacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/plumb-dev/plumb/pcap"
	"github.com/plumb-dev/plumb/pcap/filter"
)

// iface is an interface to capture from.
type iface struct {
	name    string
	link    layers.LinkType
	arphrd  uint16
	index   int
	mac     net.HardwareAddr
	program *filter.Filter
}

// LiveSource captures from network interfaces with AF_PACKET (no cgo;
// needs root or CAP_NET_RAW). It is live: nothing can be read again after
// a crash, and packets are dropped (and counted) while the spool is full.
//
// The filter is compiled for each interface's framing and attached to its
// sockets: the kernel drops what it does not keep. With "any", the
// interfaces are those present at start.
func LiveSource(cfg LiveConfig, stats *LiveStats, log *slog.Logger) (Source, error) {
	if cfg.Fanout <= 0 {
		cfg.Fanout = 1
	}
	if cfg.Snaplen <= 0 {
		cfg.Snaplen = 262144
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = 32 << 20
	}
	names := cfg.Interfaces
	cooked := len(names) > 1
	if len(names) == 1 && names[0] == "any" {
		all, err := allInterfaces()
		if err != nil {
			return Source{}, err
		}
		names, cooked = all, true
	}
	if len(names) == 0 {
		return Source{}, errors.New("no interface to capture from")
	}
	var ifs []iface
	for _, n := range names {
		ifc, err := lookup(n)
		if err != nil {
			return Source{}, err
		}
		if cfg.Filter != "" {
			if ifc.program, err = filter.Compile(cfg.Filter, ifc.link); err != nil {
				return Source{}, fmt.Errorf("interface %s: %w", n, err)
			}
		}
		ifs = append(ifs, ifc)
	}
	link := ifs[0].link
	if cooked {
		link = layers.LinkTypeLinuxSLL2
	}
	return Source{Name: "live:" + strings.Join(cfg.Interfaces, ","), Live: true, Open: func() (io.ReadCloser, error) {
		rc, err := openLive(cfg, ifs, link, cooked, stats)
		if err == nil {
			log.Info("live capture started", "interfaces", strings.Join(names, ","), "link_type", link.String(),
				"readers_per_interface", cfg.Fanout, "filter", cfg.Filter)
		}
		return rc, err
	}}, nil
}

// allInterfaces lists the interfaces the agent can capture from.
func allInterfaces() ([]string, error) {
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if _, err := lookup(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, errors.New("no interface the agent can capture from (Ethernet, loopback or raw IP)")
	}
	return out, nil
}

// lookup tells an interface's framing from its ARPHRD type.
func lookup(name string) (iface, error) {
	dir := filepath.Join("/sys/class/net", name)
	raw, err := os.ReadFile(filepath.Join(dir, "type"))
	if err != nil {
		return iface{}, fmt.Errorf("interface %s: %w (list them with `ip link`)", name, err)
	}
	t, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	ifc := iface{name: name, arphrd: uint16(t)}
	switch t {
	case 1, 772: // Ethernet, loopback (Ethernet framing on AF_PACKET)
		ifc.link = layers.LinkTypeEthernet
	case 65534: // no link layer (tun): raw IP
		ifc.link = layers.LinkTypeRaw
	default:
		return iface{}, fmt.Errorf("interface %s has link type %d, which the agent cannot capture yet", name, t)
	}
	idx, _ := os.ReadFile(filepath.Join(dir, "ifindex"))
	ifc.index, _ = strconv.Atoi(strings.TrimSpace(string(idx)))
	mac, _ := os.ReadFile(filepath.Join(dir, "address"))
	ifc.mac, _ = net.ParseMAC(strings.TrimSpace(string(mac)))
	return ifc, nil
}

// arphrdLoopback is the ARPHRD type of a loopback interface.
const arphrdLoopback = 772

// loopbackGuard drops a packet's outgoing copy. Linux shows each packet
// sent on a loopback interface to a packet socket twice, going out and
// coming in; libpcap keeps only the incoming one (tcpdump -i lo counts
// 500 datagrams where the agent counted 1,000), and so does the agent.
var loopbackGuard = func() []bpf.RawInstruction {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipFalse: 1},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic(err) // a constant program
	}
	return prog
}()

// keepAll is the end of a program without a filter: keep the whole frame.
var keepAll = []bpf.RawInstruction{{Op: 0x06, K: 0xffffffff}} // ret #-1

// socketProgram is what an interface's sockets run: on loopback first the
// guard, then the capture filter; nil when there is neither.
func socketProgram(ifc iface) []bpf.RawInstruction {
	var rest []bpf.RawInstruction
	if ifc.program != nil {
		rest = ifc.program.Program()
	}
	if ifc.arphrd != arphrdLoopback {
		return rest
	}
	if rest == nil {
		rest = keepAll
	}
	// The filter's jumps are relative, so it runs unchanged after the guard.
	return append(slices.Clip(loopbackGuard), rest...)
}

// live turns AF_PACKET rings into one pcap stream for the cutter. Each
// reader goroutine owns its handle and closes it when it stops, since a
// handle must not be closed while it is being read.
type live struct {
	pr   *io.PipeReader
	stop atomic.Bool
	done chan struct{}

	// The kernel's drops in stream order: marks[i] says that before
	// packet marks[i].at of the stream the sockets had dropped
	// marks[i].total, so a block records the drops among its packets
	// whenever the counters happen to be read. marksMu is not the
	// writer's lock: a reader holds that while the cutter drains the
	// pipe, and the cutter asks for drops between packets.
	written atomic.Int64 // packets written to the stream
	marksMu sync.Mutex
	marks   []dropMark
}

type dropMark struct{ at, total int64 }

// DropsAt is what the kernel had dropped before the stream's packet n.
func (l *live) DropsAt(n int64) int64 {
	l.marksMu.Lock()
	defer l.marksMu.Unlock()
	i := sort.Search(len(l.marks), func(i int) bool { return l.marks[i].at > n })
	if i == 0 {
		return 0
	}
	return l.marks[i-1].total
}

// readerFrame is the most a ring frame holds.
const readerFrame = 1 << 16

func openLive(cfg LiveConfig, ifs []iface, link layers.LinkType, cooked bool, stats *LiveStats) (io.ReadCloser, error) {
	type reader struct {
		h   *afpacket.TPacket
		ifc iface
		n   int
		st  *IfaceStats
	}
	var readers []reader
	closeAll := func() {
		for _, r := range readers {
			r.h.Close()
		}
	}
	block := 1 << 20
	blocks := max(cfg.BufferSize/block, 1)
	if cfg.BufferSize < block {
		block, blocks = max(cfg.BufferSize, readerFrame), 1
	}
	group := uint16(rand.N(1 << 16))
	for i, ifc := range ifs {
		st := stats.Iface(ifc.name, cfg.Fanout)
		for n := range cfg.Fanout {
			h, err := afpacket.NewTPacket(afpacket.OptInterface(ifc.name), afpacket.OptFrameSize(readerFrame),
				afpacket.OptBlockSize(block), afpacket.OptNumBlocks(blocks), afpacket.OptPollTimeout(200*time.Millisecond),
				afpacket.OptAddVLANHeader(true))
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("capture on %s: %w (the agent needs root or CAP_NET_RAW)", ifc.name, err)
			}
			readers = append(readers, reader{h, ifc, n, st})
			if prog := socketProgram(ifc); prog != nil {
				if err := h.SetBPF(prog); err != nil {
					closeAll()
					return nil, fmt.Errorf("capture on %s: attach the filter %q: %w", ifc.name, cfg.Filter, err)
				}
			}
			if cfg.Promisc && n == 0 {
				if err := h.SetPromiscuous(true); err != nil {
					closeAll()
					return nil, fmt.Errorf("capture on %s: promiscuous mode: %w", ifc.name, err)
				}
			}
			if cfg.Fanout > 1 {
				// One group per interface; the hash keeps a flow's packets,
				// both ways, on one reader.
				if err := h.SetFanout(afpacket.FanoutHash, group+uint16(i)); err != nil {
					closeAll()
					return nil, fmt.Errorf("capture on %s: fanout: %w", ifc.name, err)
				}
			}
			h.InitSocketStats()
		}
	}
	pr, pw := io.Pipe()
	l := &live{pr: pr, done: make(chan struct{})}
	w, err := pcap.NewWriter(pw, link, uint32(cfg.Snaplen), true)
	if err != nil {
		closeAll()
		return nil, err
	}
	var mu sync.Mutex // the writer
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(readers))
	for _, r := range readers {
		wg.Go(func() {
			defer r.h.Close()
			var dropped uint
			account := func() {
				v2, v3, err := r.h.SocketStats()
				if d := max(v2.Drops(), v3.Drops()); err == nil && d > dropped {
					r.st.KernelDropped.Add(int64(d - dropped))
					t := total.Add(int64(d - dropped))
					dropped = d
					l.marksMu.Lock()
					l.marks = append(l.marks, dropMark{at: l.written.Load(), total: t})
					if len(l.marks) > 4096 {
						l.marks = slices.Delete(l.marks, 0, 2048) // long past: the cutter is far beyond
					}
					l.marksMu.Unlock()
				}
			}
			defer account()
			lastAccount := time.Now()
			var sll [20]byte
			for {
				data, ci, err := r.h.ZeroCopyReadPacketData()
				if errors.Is(err, afpacket.ErrTimeout) {
					account()
					mu.Lock()
					err := w.Flush()
					mu.Unlock()
					if err != nil {
						errs <- err
						return
					}
					if l.stop.Load() {
						return // stopped, and this ring is drained
					}
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("capture on %s: %w", r.ifc.name, err)
					return
				}
				if r.st.Packets.Add(1)%1024 == 0 && time.Since(lastAccount) > 100*time.Millisecond {
					account() // a busy ring never times out
					lastAccount = time.Now()
				}
				r.st.Readers[r.n].Add(1)
				mu.Lock()
				err = writeFrame(w, ci, data, cfg.Snaplen, cooked, r.ifc, &sll)
				l.written.Add(1)
				mu.Unlock()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		defer close(l.done)
		wg.Wait()
		close(errs)
		err := <-errs
		if err == nil {
			err = w.Flush()
		}
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	return l, nil
}

// writeFrame writes one captured frame, as it is or as Linux cooked v2.
func writeFrame(w *pcap.Writer, ci gopacket.CaptureInfo, data []byte, snaplen int, cooked bool, ifc iface, sll *[20]byte) error {
	if !cooked {
		if len(data) > snaplen {
			data = data[:snaplen]
		}
		return w.WritePacket(ci, data)
	}
	// SLL2: protocol, reserved, interface index, ARPHRD type, packet
	// type, address length, address (8 bytes).
	*sll = [20]byte{}
	payload := data
	var proto uint16
	pktType := byte(0) // to us
	switch ifc.link {
	case layers.LinkTypeEthernet:
		if len(data) < 14 {
			return nil
		}
		proto = binary.BigEndian.Uint16(data[12:])
		src, dst := data[6:12], data[0:6]
		switch {
		case len(ifc.mac) == 6 && string(src) == string(ifc.mac) && ifc.arphrd != 772:
			pktType = 4 // outgoing
		case len(ifc.mac) == 6 && string(dst) == string(ifc.mac):
			pktType = 0
		case dst[0] == 0xff && string(dst) == "\xff\xff\xff\xff\xff\xff":
			pktType = 1 // broadcast
		case dst[0]&1 == 1:
			pktType = 2 // multicast
		default:
			pktType = 3 // to another host
		}
		sll[11] = 6
		copy(sll[12:], src)
		payload = data[14:]
		ci.Length -= 14
	default: // raw IP
		if len(data) > 0 && data[0]>>4 == 6 {
			proto = 0x86dd
		} else {
			proto = 0x0800
		}
	}
	binary.BigEndian.PutUint16(sll[0:], proto)
	binary.BigEndian.PutUint32(sll[4:], uint32(ifc.index))
	binary.BigEndian.PutUint16(sll[8:], ifc.arphrd)
	sll[10] = pktType
	frame := append(sll[:], payload...)
	if len(frame) > snaplen {
		frame = frame[:snaplen]
	}
	ci.Length += len(sll)
	return w.WritePacket(ci, frame)
}

func (l *live) Read(p []byte) (int, error) { return l.pr.Read(p) }

// Stop ends the capture gracefully: what the kernel already captured is
// still read (until each ring is quiet for one poll), then the stream ends.
func (l *live) Stop() { l.stop.Store(true) }

func (l *live) Close() error {
	l.stop.Store(true)
	l.pr.CloseWithError(io.ErrClosedPipe)
	<-l.done
	return nil
}
