package server

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/flight"
)

// FuzzActions: a logged-in user with no rule at all calls every action
// with any body. Nothing the server holds changes (queues, groups, stream
// consumers, sites, retention, stores, programs), nothing answers with
// more than refusals and empty lists, and memory stays bounded: bodies
// were decoded before any size or right was checked, and 30 of 60 MiB took
// the server to 8 GB.
func FuzzActions(f *testing.F) {
	file, secrets := usersFile(f)
	uf, err := auth.LoadOrNew(file)
	if err != nil {
		f.Fatal(err)
	}
	if secrets["mallory"], err = uf.AddUser("mallory", []string{"nobody"}); err != nil {
		f.Fatal(err)
	}
	if err := uf.Save(file); err != nil {
		f.Fatal(err)
	}
	addr := runServer(f, Config{Users: file})
	ctx := context.Background()
	ops := dialAs(f, addr, client.Security{User: "ops", Secret: secrets["ops"]})
	if _, err := ops.Put(ctx, bytesSource(name(1), []byte("a block"))); err != nil {
		f.Fatal(err)
	}
	if err := ops.Do(ctx, flight.ActSetRetention, map[string]string{"queue": "pcap.sz", "retention": "30d"}, nil); err != nil {
		f.Fatal(err)
	}
	if err := ops.StreamAction(ctx, flight.ActPutState, flight.StreamRequest{Queue: "pcap.sz", Instance: "lax", Consumer: "ops-c", State: map[string]string{"k": "v"}}, nil); err != nil {
		f.Fatal(err)
	}
	mallory := dialAs(f, addr, client.Security{User: "mallory", Secret: secrets["mallory"]})
	snapshot := func(t testing.TB) string {
		var b bytes.Buffer
		for _, a := range []struct {
			act  flight.Action
			body any
		}{
			{flight.ActListBlocks, map[string]any{"queue": "pcap.sz"}}, {flight.ActGroupList, map[string]string{"queue": "pcap.sz"}},
			{flight.ActListState, map[string]string{"queue": "pcap.sz"}}, {flight.ActSiteOwners, struct{}{}}, {flight.ActRetention, struct{}{}},
			{flight.ActStoreList, struct{}{}}, {flight.ActFaulty, struct{}{}},
		} {
			b.WriteString(a.act.Name + ":")
			err := ops.Do(ctx, a.act, a.body, func(raw []byte) error {
				var v map[string]any
				json.Unmarshal(raw, &v)
				delete(v, "free") // a store's free space moves with the machine
				delete(v, "used")
				out, _ := json.Marshal(v)
				b.Write(out)
				return nil
			})
			if err != nil {
				t.Fatalf("snapshot %s: %v", a.act.Name, err)
			}
		}
		qs, err := ops.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			out, _ := json.Marshal(q)
			b.Write(out)
		}
		return b.String()
	}
	before := snapshot(f)
	names := make([]string, 0, len(flight.Actions))
	for _, a := range flight.Actions {
		names = append(names, a.Name)
	}
	for i := range names {
		for _, body := range []string{`{}`, `{"queue":"pcap.sz","group":"g","instance":"lax","consumer":"ops-c","blocks":["` + name(1) + `"]}`,
			`{"queue":"pcap.sz","retention":"1s","drop_unconsumed":true}`, `{"name":"b","url":"file:///tmp/x"}`, `{"job":"j","yaml":"job: j\n"}`, `[]`, `null`} {
			f.Add(uint8(i), []byte(body))
		}
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		action := names[int(which)%len(names)]
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		stream, err := mallory.Flight().DoAction(cctx, &aflight.Action{Type: action, Body: body})
		if err == nil {
			for {
				res, err := stream.Recv()
				if err != nil {
					if c := codeOf(err); err.Error() != "EOF" && c != codes.PermissionDenied && c != codes.InvalidArgument && c != codes.NotFound &&
						c != codes.ResourceExhausted && c != codes.Unimplemented && c != codes.FailedPrecondition {
						t.Fatalf("%s %q: %v", action, body, err)
					}
					break
				}
				// What a user with no rights may see: empty lists, its own
				// nothing, the server's read-admission figures.
				if action != "read-admission" && action != "list-jobs" && action != "program-list" && len(res.Body) > 0 &&
					!bytes.Equal(res.Body, []byte("null")) && !bytes.Contains(res.Body, []byte(`"found":false`)) {
					t.Fatalf("%s %q answered %s to a user with no rights", action, body, res.Body)
				}
			}
		}
		if after := snapshot(t); after != before {
			t.Fatalf("%s %q changed the server:\n%s\n→\n%s", action, body, before, after)
		}
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > base+256<<20 {
			t.Fatalf("%s %q: heap in use %d MiB, from %d", action, body, ms.HeapInuse>>20, base>>20)
		}
	})
}
