package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/engine"
	"github.com/prometheus/client_golang/prometheus"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/flight"
)

// FuzzTicket: any bytes as a ticket give a ticket whose names are valid, or
// an error; never a panic.
func FuzzTicket(f *testing.F) {
	for _, s := range []string{
		`{"block":"20250505-151105-01789592.lax.pcap.sz"}`,
		`{"queue":"pcap.sz","group":"g","follow":true,"from":"earliest","visibility":1.5}`,
		`{"queue":"../x"}`, `{"block":"x","queue":"y"}`, `{`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tk, err := parseTicket(raw)
		if err != nil {
			return
		}
		if tk.Block != "" {
			if _, err := block.Parse(tk.Block); err != nil {
				t.Fatalf("accepted block ticket with bad name %q", tk.Block)
			}
			return
		}
		if block.ValidateQueue(tk.Queue) != nil || tk.Group != "" && block.ValidateGroup(tk.Group) != nil {
			t.Fatalf("accepted ticket with bad queue or group: %+v", tk)
		}
	})
}

// FuzzPutHeader: an accepted header always yields a blob key that is valid
// and stays inside the stream's queue and instance.
func FuzzPutHeader(f *testing.F) {
	f.Add([]byte(`{"name":"20250505-151105-00000001.lax.pcap.sz","size":10,"sha256":"` + strings.Repeat("ab", 32) + `"}`))
	f.Add([]byte(`{"name":"../../x","size":-1,"sha256":""}`))
	cmd := flight.PutCommand{Queue: "pcap.sz", Instance: "lax"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, n, sum, err := parseHeader(cmd, raw, 1<<30)
		if err != nil {
			return
		}
		key := blob.BlockKey(n, sum)
		if err := blob.CheckKey(key); err != nil {
			t.Fatalf("header %q gave an invalid key: %v", raw, err)
		}
		if !strings.HasPrefix(key, "pcap.sz/lax/") || strings.Count(key, "/") != 2 || h.Size < 0 {
			t.Fatalf("header %q gave key %q outside its queue and instance", raw, key)
		}
	})
}

// recordingPut keeps what a client sends on DoPut.
type recordingPut struct {
	aflight.FlightService_DoPutClient
	sent []*aflight.FlightData
}

func (r *recordingPut) Send(fd *aflight.FlightData) error {
	r.sent = append(r.sent, proto.Clone(fd).(*aflight.FlightData))
	return nil
}

// SendMsg takes the block writer's pre-encoded messages, as gRPC would:
// through the codec, into the FlightData they are on the wire.
func (r *recordingPut) SendMsg(m any) error {
	if fd, ok := m.(*aflight.FlightData); ok {
		return r.Send(fd)
	}
	bs, err := flight.Codec().Marshal(m)
	if err != nil {
		return err
	}
	defer bs.Free()
	fd := new(aflight.FlightData)
	if err := proto.Unmarshal(bs.Materialize(), fd); err != nil {
		return err
	}
	r.sent = append(r.sent, fd)
	return nil
}

// FuzzFlightData feeds a real upload's FlightData messages, one of them
// with a field replaced by the fuzzer's bytes (bit flips, truncations,
// garbage), to the server's DoPut, and a ticket to DoGet: the server
// answers with an error or a result, never with a recovered panic (issue
// 18 logged 134 of them from bit-flipped FlightData).
func FuzzFlightData(f *testing.F) {
	reg := prometheus.NewRegistry()
	addr := runServer(f, Config{Engine: engine.Config{Registerer: reg}})
	c, err := client.Dial(addr)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	// The server's own count of recovered panics, as /metrics shows it.
	panics := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			f.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "plumb_flight_panics_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		f.Fatal("the server registered no plumb_flight_panics_total")
		return 0
	}
	data := bytes.Repeat([]byte("block bytes "), 100)
	rec := &recordingPut{}
	w, err := flight.NewBlockWriter(rec, &aflight.FlightDescriptor{Type: aflight.DescriptorCMD, Cmd: []byte(`{"queue":"raw","instance":"lax"}`)})
	if err != nil {
		f.Fatal(err)
	}
	src := bytesSource("20250505-151105-00000001.lax.raw", data)
	meta, _ := json.Marshal(flight.Header{Name: src.Name, Size: src.Size, SHA256: src.SHA256})
	if err := w.CopyBlock(src.Name, bytes.NewReader(data), src.Size, meta); err != nil {
		f.Fatal(err)
	}
	if len(rec.sent) < 2 {
		f.Fatalf("an upload of %d messages", len(rec.sent))
	}
	for i := range rec.sent {
		for field := range uint8(4) {
			f.Add(uint8(i), field, []byte{})
			var orig []byte
			switch field {
			case 0:
				orig = rec.sent[i].DataHeader
			case 1:
				orig = rec.sent[i].DataBody
			case 2:
				orig = rec.sent[i].AppMetadata
			}
			if len(orig) > 0 {
				flipped := bytes.Clone(orig)
				flipped[len(flipped)/2] ^= 0x80
				f.Add(uint8(i), field, flipped)
				f.Add(uint8(i), field, orig[:len(orig)/2])
			}
		}
	}
	f.Fuzz(func(t *testing.T, which, field uint8, b []byte) {
		before := panics()
		msgs := make([]*aflight.FlightData, len(rec.sent))
		for i, m := range rec.sent {
			msgs[i] = proto.Clone(m).(*aflight.FlightData)
		}
		m := msgs[int(which)%len(msgs)]
		switch field % 4 {
		case 0:
			m.DataHeader = b
		case 1:
			m.DataBody = b
		case 2:
			m.AppMetadata = b
		case 3: // a ticket
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if s, err := c.Flight().DoGet(ctx, &aflight.Ticket{Ticket: b}); err == nil {
				for {
					if _, err := s.Recv(); err != nil {
						break
					}
				}
			}
		}
		if field%4 != 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stream, err := c.Flight().DoPut(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if stream.Send(m) != nil {
					break
				}
			}
			stream.CloseSend()
			for {
				if _, err := stream.Recv(); err != nil {
					break
				}
			}
		}
		if after := panics(); after != before {
			t.Fatalf("message %d field %d = %x: the server recovered a panic", which, field, b)
		}
	})
}

// TestPutMetadataFlood is issue 18's DoPut attack: 200 metadata-only
// messages of 5 MiB before any batch took a server from 24 MB to 1 GB,
// before any permission check. Now a caller without write is refused on
// the descriptor, and a writer's flood is refused at the first oversized
// message, with the server's heap unmoved.
func TestPutMetadataFlood(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file})
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	agent := dialAgent(t, addr, secrets)
	flood := func(c *client.Client, queue string, size, count int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := c.Flight().DoPut(ctx)
		if err != nil {
			return err
		}
		blob := bytes.Repeat([]byte("m"), size)
		desc := &aflight.FlightDescriptor{Type: aflight.DescriptorCMD, Cmd: []byte(`{"queue":"` + queue + `","instance":"lax"}`)}
		for i := range count {
			fd := &aflight.FlightData{AppMetadata: blob}
			if i == 0 {
				fd.FlightDescriptor = desc
			}
			if stream.Send(fd) != nil {
				break
			}
		}
		stream.CloseSend()
		for {
			if _, err := stream.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := flood(ana, "pcap.sz", 1<<20, 50); codeOf(err) != codes.PermissionDenied {
		t.Errorf("a reader's flood: %v", err)
	}
	if err := flood(agent, "pcap.sz", 5<<20, 200); codeOf(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("a writer's 5 MiB messages: %v", err)
	}
	if err := flood(agent, "pcap.sz", 1<<20, 200); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metadata-only messages") {
		t.Errorf("a writer's 1 MiB messages: %v", err)
	}
	if err := flood(agent, "pcap.sz", 8<<10, 200); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metadata-only messages") {
		t.Errorf("a writer's 200 small ones: %v", err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("heap in use %d → %d MiB", before.HeapInuse>>20, after.HeapInuse>>20)
	if after.HeapInuse > before.HeapInuse+64<<20 {
		t.Errorf("the floods left the heap at %d MiB (from %d)", after.HeapInuse>>20, before.HeapInuse>>20)
	}
}
