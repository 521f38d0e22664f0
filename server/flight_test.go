package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/blob"
	"github.com/plumb-dev/plumb/block"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/internal/testenv"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumb-dev/plumb/flight"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}

type testServer struct {
	addr string
	data string
	c    *client.Client
}

// startServer runs a real server on 127.0.0.1:0 for the test.
func startServer(t *testing.T, cfg Config) *testServer { return startServerTB(t, cfg) }

func startServerB(b *testing.B) *testServer { return startServerTB(b, Config{}) }

func startServerTB(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.Data == "" {
		cfg.Data = t.TempDir()
	}
	addr := runServer(t, cfg)
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &testServer{addr: addr, data: cfg.Data, c: c}
}

func bytesSource(name string, data []byte) client.Source {
	sum := sha256.Sum256(data)
	return client.Source{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func name(seq int) string { return fmt.Sprintf("20250505-151105-%08d.lax.pcap.sz", seq) }

func getBlock(t *testing.T, c *client.Client, n string) ([]byte, error) {
	t.Helper()
	s, err := c.Get(context.Background(), n)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if !s.Next() {
		return nil, s.Err()
	}
	if s.Header().Name != n {
		t.Fatalf("asked for %s, got %s", n, s.Header().Name)
	}
	b, err := io.ReadAll(s)
	if err != nil {
		return b, err
	}
	if s.Next() {
		t.Fatalf("block ticket returned a second block %s", s.Header().Name)
	}
	return b, s.Err()
}

func wantCode(t *testing.T, err error, code codes.Code, says string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), says) {
		t.Fatalf("error = %v; want %s saying %q", err, code, says)
	}
}

func TestPutGetDuplicateConflict(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	big := randBytes(5*flight.ChunkSize+123, 1) // several batches, a partial last one
	res, err := ts.c.Put(ctx, bytesSource(name(1), big), bytesSource(name(2), nil), bytesSource(name(3), []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != "stored" || r.Name != name(i+1) {
			t.Fatalf("result %d = %+v, want stored %s", i, r, name(i+1))
		}
	}
	for seq, want := range map[int][]byte{1: big, 2: {}, 3: []byte("x")} {
		got, err := getBlock(t, ts.c, name(seq))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s: %d bytes, %v; want the %d put", name(seq), len(got), err, len(want))
		}
	}

	res, err = ts.c.Put(ctx, bytesSource(name(1), big))
	if err != nil || res[0].Status != "duplicate" {
		t.Fatalf("re-sent block = %+v, %v; want duplicate", res, err)
	}
	other := bytes.Clone(big)
	other[0] ^= 1
	_, err = ts.c.Put(ctx, bytesSource(name(1), other))
	wantCode(t, err, codes.FailedPrecondition, "already stored with sha256 "+bytesSource("", big).SHA256)
	if got, _ := getBlock(t, ts.c, name(1)); !bytes.Equal(got, big) {
		t.Fatal("a conflicting upload changed the stored block")
	}
	_, err = getBlock(t, ts.c, name(9))
	wantCode(t, err, codes.NotFound, "is not stored")

	qs, err := ts.c.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Queue != "pcap.sz" || qs[0].Blocks != 3 || qs[0].Bytes != int64(len(big)+1) {
		t.Fatalf("queues = %+v, %v", qs, err)
	}
	if ls, err := ts.c.LastSeq(ctx, "pcap.sz", "lax"); err != nil || !ls.Found || ls.Seq != 3 {
		t.Fatalf("last-seq = %+v, %v; want 3", ls, err)
	}
	if ls, err := ts.c.LastSeq(ctx, "pcap.sz", "nyc"); err != nil || ls.Found {
		t.Fatalf("last-seq of an unknown instance = %+v, %v", ls, err)
	}
	blocks, err := ts.c.Blocks(ctx, "pcap.sz")
	if err != nil || len(blocks) != 3 || blocks[2].Name != name(3) {
		t.Fatalf("blocks = %+v, %v", blocks, err)
	}
	fi, err := ts.c.Flight().GetFlightInfo(ctx, &aflight.FlightDescriptor{Type: aflight.DescriptorPATH, Path: []string{"pcap.sz"}})
	if err != nil || fi.TotalBytes != int64(len(big)+1) || len(fi.Endpoint) != 1 {
		t.Fatalf("flight info = %v, %v", fi, err)
	}
	_, err = ts.c.Flight().GetFlightInfo(ctx, &aflight.FlightDescriptor{Type: aflight.DescriptorPATH, Path: []string{"nope"}})
	wantCode(t, err, codes.NotFound, "nope")
}

// rawPut sends one hand-made block and returns the server's verdict.
func rawPut(t *testing.T, c *client.Client, cmd string, hdr string, data []byte, metaOnly bool) error {
	t.Helper()
	stream, err := c.Flight().DoPut(context.Background())
	if err != nil {
		return err
	}
	w, err := flight.NewBlockWriter(stream, &aflight.FlightDescriptor{Type: aflight.DescriptorCMD, Cmd: []byte(cmd)})
	if err != nil {
		return err
	}
	var sendErr error
	if metaOnly {
		sendErr = stream.Send(&aflight.FlightData{AppMetadata: []byte(hdr)})
		if sendErr == nil && len(data) > 0 {
			sendErr = w.CopyBlock("raw", bytes.NewReader(data), int64(len(data)), nil)
		}
	} else {
		sendErr = w.CopyBlock("raw", bytes.NewReader(data), int64(len(data)), []byte(hdr))
	}
	_ = sendErr // the status comes from Recv
	stream.CloseSend()
	for {
		pr, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var r flight.PutResult
		json.Unmarshal(pr.AppMetadata, &r)
		if r.Status != "stored" {
			return fmt.Errorf("status %q", r.Status)
		}
	}
}

func hdr(n string, size int, sum string) string {
	b, _ := json.Marshal(flight.Header{Name: n, Size: int64(size), SHA256: sum})
	return string(b)
}

func TestBadInput(t *testing.T) {
	ts := startServer(t, Config{MaxBlockSize: 1 << 30})
	data := []byte("some capture bytes")
	sum := bytesSource("", data).SHA256
	cmd := `{"queue":"pcap.sz","instance":"lax"}`
	for _, tc := range []struct {
		what, cmd, hdr string
		data           []byte
		code           codes.Code
		says           string
	}{
		{"traversal name", cmd, hdr("../x", len(data), sum), data, codes.InvalidArgument, "invalid name"},
		{"slash", cmd, hdr("20250505-151105-00000001.lax/x.pcap.sz", len(data), sum), data, codes.InvalidArgument, "not allowed"},
		{"NUL", cmd, hdr("20250505-151105-00000001.lax.pcap\x00.sz", len(data), sum), data, codes.InvalidArgument, "not allowed"},
		{"over-long", cmd, hdr("20250505-151105-00000001.lax."+strings.Repeat("q", 300), len(data), sum), data, codes.InvalidArgument, "longer than"},
		{"wrong queue", cmd, hdr("20250505-151105-00000001.lax.pcap", len(data), sum), data, codes.InvalidArgument, "belongs to queue"},
		{"bad descriptor", `{"queue":"../etc"}`, hdr(name(1), len(data), sum), data, codes.InvalidArgument, `queue "../etc"`},
		{"bad queue", `{"queue":"a..b","instance":"lax"}`, hdr(name(1), len(data), sum), data, codes.InvalidArgument, "queue"},
		{"header not JSON", cmd, "{nope", data, codes.InvalidArgument, "block header"},
		{"unknown header field", cmd, `{"name":"x","size":1,"sha256":"","extra":1}`, data, codes.InvalidArgument, "unknown field"},
		{"bad sha256", cmd, hdr(name(1), len(data), "zz"), data, codes.InvalidArgument, "sha256"},
		{"checksum mismatch", cmd, hdr(name(1), len(data), strings.Repeat("0", 64)), data, codes.InvalidArgument, "does not match"},
		{"size too small", cmd, hdr(name(1), len(data)-1, sum), data, codes.InvalidArgument, "more bytes than its declared size"},
		{"size too big", cmd, hdr(name(1), len(data)+5, sum), data, codes.InvalidArgument, "stream ended inside block"},
		{"size absurd", cmd, hdr(name(1), 1<<40, sum), data, codes.InvalidArgument, "outside"},
		{"sequence number 0", cmd, hdr(name(0), len(data), sum), data, codes.InvalidArgument, "outside 1.."},
		{"sequence number 2^64-1", cmd, hdr("20250505-151105-18446744073709551615.lax.pcap.sz", len(data), sum), data, codes.InvalidArgument, "outside 1.."},
	} {
		err := rawPut(t, ts.c, tc.cmd, tc.hdr, tc.data, false)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %s saying %q", tc.what, err, tc.code, tc.says)
		}
	}
	if qs, _ := ts.c.Queues(context.Background()); len(qs) != 0 {
		t.Fatalf("refused uploads left queues behind: %+v", qs)
	}
	assertNoBlobs(t, ts.data)

	// The header may also come as a metadata-only message.
	if err := rawPut(t, ts.c, cmd, hdr(name(1), len(data), sum), data, true); err != nil {
		t.Fatalf("metadata-only header: %v", err)
	}

	for _, tkt := range []struct{ raw, says string }{
		{`{nope`, "not valid JSON"},
		{`{"bloc": "x"}`, "unknown field"},
		{`{}`, "neither a block nor a queue"},
		{`{"block": "../../etc/passwd"}`, "invalid name"},
		{`{"queue": "pcap.sz", "from": "yesterday"}`, "from"},
		{`{"queue": "pcap.sz", "group": "a/b"}`, "group"},
		{`{"block": "x", "queue": "y"}`, "both"},
	} {
		rpc, err := ts.c.Flight().DoGet(context.Background(), &aflight.Ticket{Ticket: []byte(tkt.raw)})
		if err == nil {
			_, err = rpc.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tkt.says) {
			t.Errorf("ticket %s: %v; want InvalidArgument saying %q", tkt.raw, err, tkt.says)
		}
	}
	_, err := ts.c.Ack(context.Background(), "pcap.sz", "g", "../x")
	wantCode(t, err, codes.InvalidArgument, "invalid name")
	err = ts.c.Do(context.Background(), flight.Action{Name: "frobnicate"}, nil, nil)
	wantCode(t, err, codes.InvalidArgument, "not known")
}

// blobFiles counts the files under the store's directory, temp files too,
// but not the store's owner record.
func blobFiles(data string) int {
	n := 0
	filepath.WalkDir(filepath.Join(data, "blobs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != blob.OwnerKey {
			n++
		}
		return nil
	})
	return n
}

func assertNoBlobs(t *testing.T, data string) {
	t.Helper()
	filepath.WalkDir(filepath.Join(data, "blobs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != blob.OwnerKey {
			t.Errorf("blob file %s is visible after refused uploads", p)
		}
		return nil
	})
}

// TestDisconnectMidUpload cancels an upload halfway: nothing is stored, and
// the block can be sent again in full.
func TestDisconnectMidUpload(t *testing.T) {
	ts := startServer(t, Config{})
	data := randBytes(8*flight.ChunkSize, 2)
	src := bytesSource(name(1), data)
	ctx, cancel := context.WithCancel(context.Background())
	half := src
	half.Open = func() (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(data[:4*flight.ChunkSize]), readerFunc(func([]byte) (int, error) {
			cancel()
			<-ctx.Done()
			return 0, ctx.Err()
		}))), nil
	}
	if _, err := ts.c.Put(ctx, half); err == nil {
		t.Fatal("cancelled upload succeeded")
	}
	// The server notices the cancellation asynchronously, and may not
	// have opened its temp file yet when the client gives up: wait until
	// the store has held no file for a while.
	deadline := time.Now().Add(5 * time.Second)
	for quiet := 0; quiet < 10 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if blobFiles(ts.data) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	assertNoBlobs(t, ts.data)
	if _, err := getBlock(t, ts.c, name(1)); status.Code(err) != codes.NotFound {
		t.Fatalf("half-uploaded block is visible: %v", err)
	}
	if res, err := ts.c.Put(context.Background(), src); err != nil || res[0].Status != "stored" {
		t.Fatalf("re-send after a disconnect = %+v, %v", res, err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestGroups: two readers share a group, each block goes to one of them;
// another group sees every block; unacknowledged blocks come back after the
// visibility timeout.
func TestGroups(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	var srcs []client.Source
	for i := 1; i <= 6; i++ {
		srcs = append(srcs, bytesSource(name(i), randBytes(1000*i, uint64(i))))
	}
	if _, err := ts.c.Put(ctx, srcs[:3]...); err != nil {
		t.Fatal(err)
	}

	// Two readers of group "a", following from the earliest block, ack all.
	fctx, stop := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 2 {
		s, err := ts.c.DoGet(fctx, flight.Ticket{Queue: "pcap.sz", Group: "a", Follow: true, From: "earliest"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer s.Close()
			for s.Next() {
				if _, err := io.Copy(io.Discard, s); err != nil {
					t.Error(err)
					return
				}
				if _, err := ts.c.Ack(ctx, "pcap.sz", "a", s.Header().Name); err != nil {
					t.Error(err)
				}
				mu.Lock()
				seen[s.Header().Name]++
				mu.Unlock()
			}
		})
	}
	if _, err := ts.c.Put(ctx, srcs[3:]...); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the group to finish all six blocks", func() bool {
		st, _ := ts.c.QueueStats(ctx, "pcap.sz")
		return len(st.Groups) == 1 && st.Groups[0].Done == 6
	})
	stop()
	wg.Wait()
	for _, s := range srcs {
		if seen[s.Name] != 1 {
			t.Errorf("group a got %s %d times, want once", s.Name, seen[s.Name])
		}
	}

	// Group "b" starts late: it is owed nothing already there.
	s, err := ts.c.DoGet(ctx, flight.Ticket{Queue: "pcap.sz", Group: "b", From: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Next() {
		t.Fatalf("latest group got old block %s", s.Header().Name)
	}
	s.Close()

	// Group "c" reads without acking; after the visibility timeout the
	// blocks are handed out again.
	read := func() []string {
		// Visibility long enough that a loaded CI machine reads twice
		// within it (0.2 s was not).
		s, err := ts.c.DoGet(ctx, flight.Ticket{Queue: "pcap.sz", Group: "c", From: "earliest", Visibility: 1500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var names []string
		for s.Next() {
			names = append(names, s.Header().Name)
		}
		if s.Err() != nil {
			t.Fatal(s.Err())
		}
		return names
	}
	if got := read(); len(got) != 6 {
		t.Fatalf("group c first read %d blocks, want 6", len(got))
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("reserved blocks handed out again at once: %v", got)
	}
	time.Sleep(1600 * time.Millisecond)
	if got := read(); len(got) != 6 {
		t.Fatalf("after the visibility timeout got %d blocks, want 6 again", len(got))
	}

	// A plain read (no group) lists everything and tracks nothing.
	s, err = ts.c.DoGet(ctx, flight.Ticket{Queue: "pcap.sz"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for s.Next() {
		n++
	}
	s.Close()
	if n != 6 {
		t.Fatalf("plain read got %d blocks, want 6", n)
	}
}

// TestShutdownEndsFollowers: a following reader must not hold up shutdown.
func TestShutdownEndsFollowers(t *testing.T) {
	cfg := Config{Data: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ready := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { ready <- a.String() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	c, err := client.Dial(<-ready)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.DoGet(context.Background(), flight.Ticket{Queue: "pcap.sz", Group: "g", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not stop within 5s with a follower connected")
	}
	if s.Next() {
		t.Fatal("follower got a block from a stopped server")
	}
	if status.Code(s.Err()) != codes.Unavailable {
		t.Fatalf("follower error = %v, want Unavailable", s.Err())
	}
}

// TestHopelessReadRefused: a read whose deadline is shorter than its
// estimated transfer is refused at once with DEADLINE_EXCEEDED and the
// estimate, not served late; with time enough it is served.
func TestHopelessReadRefused(t *testing.T) {
	ts := startServer(t, Config{})
	data := randBytes(96<<20, 3) // about 1.4 s at the assumed 100 MB/s and a safety factor of 1.5
	name := "20250505-151105-00000001.lax.pcap.sz"
	if _, err := ts.c.Put(context.Background(), bytesSource(name, data)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s, err := ts.c.Get(ctx, name)
	if err == nil {
		s.Next()
		err = s.Err()
		s.Close()
	}
	// The server's refusal names its estimate; a client-side timeout
	// would not.
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "need about") {
		t.Fatalf("hopeless read: %v; want the server's DEADLINE_EXCEEDED with its estimate", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	s, err = ts.c.Get(ctx2, name)
	if err != nil || !s.Next() {
		t.Fatalf("read with time enough: %v %v", err, s.Err())
	}
	n, err := io.Copy(io.Discard, s)
	s.Close()
	if err != nil || n != int64(len(data)) {
		t.Fatalf("read %d bytes: %v", n, err)
	}
}

// TestNack: a block a reader nacks goes to the group's next reader at
// once, its visibility (an hour) far off; what it acked stays done, what
// it holds and did not nack stays its own, and a nack of a block no
// reader holds releases nothing.
func TestNack(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	var srcs []client.Source
	for i := 1; i <= 3; i++ {
		srcs = append(srcs, bytesSource(name(i), randBytes(1000, uint64(i))))
	}
	if _, err := ts.c.Put(ctx, srcs...); err != nil {
		t.Fatal(err)
	}
	first, err := ts.c.DoGet(ctx, flight.Ticket{Queue: "pcap.sz", Group: "g", From: "earliest", Visibility: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for first.Next() {
		held = append(held, first.Header().Name)
	}
	first.Close()
	if len(held) != 3 {
		t.Fatalf("the first reader got %v: %v", held, first.Err())
	}
	if n, err := ts.c.Ack(ctx, "pcap.sz", "g", held[0]); err != nil || n != 1 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	n, err := ts.c.Nack(ctx, "pcap.sz", "g", held[0], held[2])
	if err != nil || n != 1 {
		t.Fatalf("nack of an acked and a held block: released %d, %v; want 1", n, err)
	}
	second, err := ts.c.DoGet(ctx, flight.Ticket{Queue: "pcap.sz", Group: "g", Visibility: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for second.Next() {
		got = append(got, second.Header().Name)
	}
	second.Close()
	if !slices.Equal(got, held[2:]) {
		t.Errorf("after the nack a second reader got %v, want only the nacked %v (the acked one is done, the other still held)", got, held[2:])
	}
	if _, err := ts.c.Nack(ctx, "pcap.sz", "g", "20250101-000000-00000009.x.pcap.sz"); status.Code(err) != codes.NotFound {
		t.Errorf("nack of a block that is not there: %v, want NotFound", err)
	}
	if _, err := ts.c.Nack(ctx, "pcap.sz", "nosuch", held[1]); err == nil {
		t.Errorf("nack for a group that does not exist succeeded")
	}
}

// TestGroupFromTime: a group created from a time receives exactly the
// blocks at or after it (by the time in their names) and what arrives
// later; a plain read from a time passes over the older blocks kept.
func TestGroupFromTime(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	at := func(seq int, hhmm string) client.Source {
		return bytesSource(fmt.Sprintf("20250505-%s00-%08d.lax.pcap.sz", hhmm, seq), []byte(fmt.Sprint("block ", seq)))
	}
	// Arrival order is not time order: 3 came late.
	if _, err := ts.c.Put(ctx, at(1, "1000"), at(2, "1100"), at(3, "0900"), at(4, "1200")); err != nil {
		t.Fatal(err)
	}
	from := client.FromTime(time.Date(2025, 5, 5, 11, 0, 0, 0, time.UTC))
	read := func(tk flight.Ticket) []int {
		s, err := ts.c.DoGet(ctx, tk)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var seqs []int
		for s.Next() {
			n, err := block.Parse(s.Header().Name)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, int(n.Seq))
			if tk.Group != "" {
				if _, err := ts.c.Ack(ctx, tk.Queue, tk.Group, s.Header().Name); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	if got := read(flight.Ticket{Queue: "pcap.sz", From: from}); fmt.Sprint(got) != "[2 4]" {
		t.Errorf("a plain read from 11:00 got %v; want [2 4]", got)
	}
	if got := read(flight.Ticket{Queue: "pcap.sz", Group: "replay", From: from}); fmt.Sprint(got) != "[2 4]" {
		t.Errorf("a group from 11:00 got %v; want [2 4]", got)
	}
	if _, err := ts.c.Put(ctx, at(5, "0800")); err != nil { // after the group: owed
		t.Fatal(err)
	}
	if got := read(flight.Ticket{Queue: "pcap.sz", Group: "replay"}); fmt.Sprint(got) != "[5]" {
		t.Errorf("the group then got %v; want [5]", got)
	}
	st, err := ts.c.QueueStats(ctx, "pcap.sz")
	if err != nil || len(st.Groups) != 1 || st.Groups[0].Done != 5 {
		t.Errorf("stats %+v %v; want the group done with all five", st, err)
	}
	_, err = ts.c.DoGet(ctx, flight.Ticket{Queue: "pcap.sz", Group: "bad", From: "yesterday"})
	wantCode(t, err, codes.InvalidArgument, "RFC 3339")
}
