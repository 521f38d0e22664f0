package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/client"
	"github.com/plumb-dev/plumb/stage"

	aflight "github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"

	"github.com/plumb-dev/plumb/auth"
	"github.com/plumb-dev/plumb/flight"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/state"
)

// twoAnalysts adds carol, a second analyst, to the users file.
func twoAnalysts(t testing.TB) (string, map[string]string) {
	t.Helper()
	file, secrets := usersFile(t)
	f, _ := auth.Load(file)
	s, err := f.AddUser("carol", []string{"analysts"})
	if err != nil {
		t.Fatal(err)
	}
	secrets["carol"] = s
	if err := f.Save(file); err != nil {
		t.Fatal(err)
	}
	return file, secrets
}

var errPeeked = errors.New("peeked")

// peek reads the first block a group owes without acking it, creating
// the group if need be.
func peek(c *client.Client, queue, group string, visibility time.Duration) ([]string, error) {
	var names []string
	err := c.Consume(context.Background(), flight.Ticket{Queue: queue, Group: group, From: "earliest", Visibility: visibility}, func(h flight.Header, r io.Reader) error {
		io.Copy(io.Discard, r)
		names = append(names, h.Name)
		return errPeeked
	})
	if errors.Is(err, errPeeked) {
		err = nil
	}
	return names, err
}

// TestGroupsHaveOwners is issue 17's second finding: a user with read on
// a queue acked another team's group (and a stage's), so their blocks were
// never processed, and held a stage's blocks for a day with a long
// visibility. Groups now belong to their creator, stage groups to the
// engine, and visibility has a ceiling.
func TestGroupsHaveOwners(t *testing.T) {
	file, secrets := twoAnalysts(t)
	addr := runServer(t, Config{Users: file, MaxVisibility: time.Minute})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	var names []string
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("20250505-1511%02d-%08d.lax.dns.arrow", i, i)
		if _, err := agent.Put(ctx, bytesSource(n, []byte("rows"))); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	carol := dialAs(t, addr, client.Security{User: "carol", Secret: secrets["carol"]})
	ops := dialAs(t, addr, client.Security{User: "ops", Secret: secrets["ops"]})

	if got, err := peek(ana, "dns.arrow", "ana-team", 0); err != nil || len(got) != 1 {
		t.Fatalf("ana's own group: %v %v", got, err)
	}
	if _, err := carol.Ack(ctx, "dns.arrow", "ana-team", names...); codeOf(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "consumer group ana-team of queue dns.arrow belongs to user ana") {
		t.Fatalf("carol acks ana's group: %v", err)
	}
	if _, err := peek(carol, "dns.arrow", "ana-team", 0); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("carol reads ana's group: %v", err)
	}
	for _, g := range []string{"stage-336cba0fdd24", "stage-x"} {
		if _, err := carol.Ack(ctx, "dns.arrow", g, names...); codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "belongs to a pipeline stage") {
			t.Errorf("ack of stage group %s: %v", g, err)
		}
		if _, err := peek(ops, "dns.arrow", g, 0); codeOf(err) != codes.PermissionDenied {
			t.Errorf("even an admin follows stage group %s: %v", g, err)
		}
	}
	if _, err := peek(carol, "dns.arrow", "carol-team", 24*time.Hour); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "over this server's maximum of 1m0s") {
		t.Fatalf("a visibility of a day: %v", err)
	}
	// ana's blocks are still owed to her: nothing carol did took them.
	if n, err := ana.Ack(ctx, "dns.arrow", "ana-team", names...); err != nil || n != 3 {
		t.Fatalf("ana acks her own group: %d %v", n, err)
	}
	// An admin may act on any user's group.
	if _, err := ops.Ack(ctx, "dns.arrow", "ana-team", names...); err != nil {
		t.Fatalf("admin ack: %v", err)
	}
	// queue-stats shows a user their own groups only.
	if _, err := peek(carol, "dns.arrow", "carol-team", 0); err != nil {
		t.Fatal(err)
	}
	qs, err := carol.QueueStats(ctx, "dns.arrow")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range qs.Groups {
		if g.Group == "ana-team" {
			t.Errorf("carol sees ana's group in queue-stats: %+v", qs.Groups)
		}
	}
	if qs, _ := ops.QueueStats(ctx, "dns.arrow"); len(qs.Groups) != 2 {
		t.Errorf("admin sees %+v", qs.Groups)
	}
	// carol removed and added again is someone else: her group is not
	// the new carol's.
	testenv.EditUsers(t, file, func(f *auth.File) {
		delete(f.Users, "carol")
		var err error
		if secrets["carol"], err = f.AddUser("carol", []string{"analysts"}); err != nil {
			t.Fatal(err)
		}
	})
	newCarol := dialAs(t, addr, client.Security{User: "carol", Secret: secrets["carol"]})
	if _, err := peek(newCarol, "dns.arrow", "carol-team", 0); codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "an earlier user named carol") {
		t.Errorf("the new carol reads the old one's group: %v", err)
	}
}

// TestRevocation: a new secret, `plumb user revoke`, removing a user and
// revoking an API key each end the old credential on the next call,
// without SIGHUP; a removed and re-added name inherits nothing.
func TestRevocation(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file})
	ctx := context.Background()
	edit := func(fn func(f *auth.File)) { t.Helper(); testenv.EditUsers(t, file, fn) }
	refused := func(c *client.Client, what string) {
		t.Helper()
		if _, err := c.Queues(ctx); codeOf(err) != codes.Unauthenticated {
			t.Errorf("%s: the old credential still works: %v", what, err)
		}
	}

	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	if _, err := ana.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	var newSecret string
	edit(func(f *auth.File) { newSecret, _ = f.AddUser("ana", []string{"analysts"}) })
	refused(ana, "after a new secret")
	ana2 := dialAs(t, addr, client.Security{User: "ana", Secret: newSecret})
	if _, err := ana2.Queues(ctx); err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	edit(func(f *auth.File) { f.Revoke("ana") })
	refused(ana2, "after user revoke")

	ops := dialAs(t, addr, client.Security{User: "ops", Secret: secrets["ops"]})
	if _, err := ops.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	edit(func(f *auth.File) { delete(f.Users, "ops"); f.AddUser("ops", []string{"operators"}) })
	refused(ops, "after remove and re-add")

	agent := dialAgent(t, addr, secrets)
	if _, err := agent.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	kid := strings.Split(secrets["key"], ".")[1]
	edit(func(f *auth.File) {
		if _, err := f.RevokeKey(kid); err != nil {
			t.Fatal(err)
		}
	})
	refused(agent, "after revoke-key")
}

// TestProgramsAreAdmins: only an admin registers or removes programs,
// and a name that could reach a path is refused.
func TestProgramsAreAdmins(t *testing.T) {
	file, secrets := usersFile(t)
	addr := runServer(t, Config{Users: file, Registry: stage.NewRegistry()})
	ctx := context.Background()
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	ops := dialAs(t, addr, client.Security{User: "ops", Secret: secrets["ops"]})
	if _, err := ana.AddProgram(ctx, flight.AddProgramRequest{Name: "sh", Path: "/bin/sh"}); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("a non-admin registers /bin/sh: %v", err)
	}
	for _, name := range []string{"../sh", "a/b", "", strings.Repeat("x", 65), "Sh"} {
		if _, err := ops.AddProgram(ctx, flight.AddProgramRequest{Name: name, Path: "/bin/sh"}); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "program name") {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, err := ops.AddProgram(ctx, flight.AddProgramRequest{Name: "d", Path: "/usr/bin"}); codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ops.AddProgram(ctx, flight.AddProgramRequest{Name: "cat", Path: "/usr/bin/cat", SHA256: "not-hex"}); codeOf(err) != codes.InvalidArgument {
		t.Errorf("a malformed checksum: %v", err)
	}
	p, err := ops.AddProgram(ctx, flight.AddProgramRequest{Name: "cat", Path: "/usr/bin/cat"})
	if err != nil || len(p.SHA256) != 64 {
		t.Fatalf("admin registers cat: %+v %v", p, err)
	}
	// Jobs name programs: where the server keeps them is the admins'.
	if ps, err := ana.Programs(ctx); err != nil || len(ps) != 1 || ps[0].Name != "cat" || ps[0].Path != "" || ps[0].Source != "" {
		t.Errorf("ana lists %+v %v", ps, err)
	}
	if ps, err := ops.Programs(ctx); err != nil || len(ps) != 1 || ps[0].Source != "/usr/bin/cat" || ps[0].Path == "" {
		t.Errorf("ops lists %+v %v", ps, err)
	}
	// A stage is shown to a user who may read all its inputs: ana reads
	// dns.* but not pcap.sz.
	job := "job: both\nqueues: [dns.x, pcap.sz]\nstages:\n  - {name: both, inputs: [dns.x, pcap.sz], program: [cat], outputs: [dns.both]}\n"
	if res, err := ops.SubmitJob(ctx, "both.yaml", []byte(job)); err != nil || res.State != "accepted" {
		t.Fatalf("ops's job: %+v %v", res, err)
	}
	stages := func(c *client.Client) (out []string) {
		rows, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Stage != "" {
				out = append(out, r.Stage+" "+r.Queue)
			}
		}
		return out
	}
	if got := stages(ana); len(got) != 0 {
		t.Errorf("ana, who may not read pcap.sz, sees %v in status", got)
	}
	if got := stages(ops); len(got) == 0 {
		t.Errorf("ops sees no stage in status")
	}
	if err := ana.RemoveProgram(ctx, "cat"); codeOf(err) != codes.PermissionDenied {
		t.Errorf("a non-admin removes a program: %v", err)
	}
	if err := ops.RemoveProgram(ctx, "nope"); codeOf(err) != codes.NotFound {
		t.Errorf("remove an unknown program: %v", err)
	}
}

// copyBuiltin copies a block through.
type copyBuiltin struct{}

func (copyBuiltin) Run(_ context.Context, _ stage.Input, in io.Reader, out io.Writer) error {
	_, err := io.Copy(out, in)
	return err
}

// TestRemovedOwnerSuspends: a removed user's job kept running (issue
// 17). Now its stages stop on the next look at the users file, the job
// list says why, the blocks that arrive meanwhile wait in the stage's
// group, and the job resumes where it stopped when the user is back.
func TestRemovedOwnerSuspends(t *testing.T) {
	file, secrets := usersFile(t)
	edit := func(fn func(f *auth.File)) { t.Helper(); testenv.EditUsers(t, file, fn) }
	edit(func(f *auth.File) {
		f.Rules = append(f.Rules, auth.Rule{Queues: "ana.*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read, auth.Write}})
	})
	reg := stage.NewRegistry()
	reg.Add(stage.Factory{Name: "copy", New: func(url.Values) (stage.Builtin, error) { return copyBuiltin{}, nil }})
	addr := runServer(t, Config{Users: file, Registry: reg})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	ops := dialAs(t, addr, client.Security{User: "ops", Secret: secrets["ops"]})

	put := func(i int) {
		t.Helper()
		n := fmt.Sprintf("20250505-1511%02d-%08d.lax.dns.arrow", i, i)
		if _, err := agent.Put(ctx, bytesSource(n, []byte("rows"))); err != nil {
			t.Fatal(err)
		}
	}
	put(1)
	res, err := ana.SubmitJob(ctx, "copy.yaml", []byte("job: mine\nfrom: earliest\nstages:\n  - name: keep\n    program: builtin:copy\n    inputs: [dns.arrow]\n    outputs: [ana.copy]\n"))
	if err != nil || res.State != "accepted" {
		t.Fatalf("submit: %+v %v", res, err)
	}
	copies := func() int {
		bs, err := ops.Blocks(ctx, "ana.copy")
		if err != nil {
			return 0
		}
		return len(bs)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testenv.WaitFor(t, 20*time.Second, what, ok)
	}
	jobState := func() (string, string) {
		jobs, err := ops.Jobs(ctx)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("jobs: %+v %v", jobs, err)
		}
		return string(jobs[0].State), jobs[0].Suspended
	}
	waitFor("the first copy", func() bool { return copies() == 1 })

	var saved *auth.User
	edit(func(f *auth.File) { saved = f.Users["ana"]; delete(f.Users, "ana") })
	waitFor("the job to be suspended", func() bool { _, why := jobState(); return why != "" })
	if st, why := jobState(); st != "accepted" || !strings.Contains(why, "owner ana is no longer in the users file") {
		t.Errorf("job list: %s %q", st, why)
	}
	put(2)
	put(3)
	time.Sleep(time.Second) // what a running stage needs for two tiny blocks
	if n := copies(); n != 1 {
		t.Fatalf("a removed owner's job copied %d blocks", n)
	}
	if qs, err := ops.QueueStats(ctx, "dns.arrow"); err != nil || len(qs.Groups) != 1 || qs.Groups[0].Unreserved != 2 {
		t.Errorf("the suspended stage's group should owe the 2 new blocks: %+v %v", qs.Groups, err)
	}

	edit(func(f *auth.File) { f.Users["ana"] = saved })
	waitFor("the job to resume", func() bool { _, why := jobState(); return why == "" })
	waitFor("the blocks that waited", func() bool { return copies() == 3 })

	// Losing a right, not the user, does the same.
	edit(func(f *auth.File) { f.Rules = f.Rules[:len(f.Rules)-1] })
	waitFor("suspension on a lost right", func() bool { _, why := jobState(); return strings.Contains(why, "may not write queue ana.copy") })

	// A user removed and added again under the same name is someone else:
	// the new ana does not take over the old one's job, nor retract it.
	edit(func(f *auth.File) {
		f.Rules = append(f.Rules, auth.Rule{Queues: "ana.*", Groups: []string{"analysts"}, Allow: []auth.Perm{auth.Read, auth.Write}})
		delete(f.Users, "ana")
		var err error
		if secrets["ana"], err = f.AddUser("ana", []string{"analysts"}); err != nil {
			t.Fatal(err)
		}
	})
	waitFor("the job to stay suspended for its removed owner", func() bool {
		_, why := jobState()
		return strings.Contains(why, "the user of that name now is someone else")
	})
	newAna := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	if err := newAna.RetractJob(ctx, "mine"); codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "another user's") {
		t.Errorf("the new ana retracts the old one's job: %v", err)
	}
}

// TestStreamConsumersHaveOwners: a stream consumer's cursor is its
// creator's, as a group is: another user cannot move, skip, checkpoint,
// read or list it, nor touch a stage's.
func TestStreamConsumersHaveOwners(t *testing.T) {
	file, secrets := twoAnalysts(t)
	addr := runServer(t, Config{Users: file})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	for i := 1; i <= 2; i++ {
		if _, err := agent.Put(ctx, bytesSource(fmt.Sprintf("20250505-1511%02d-%08d.lax.dns.arrow", i, i), []byte("rows"))); err != nil {
			t.Fatal(err)
		}
	}
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	carol := dialAs(t, addr, client.Security{User: "carol", Secret: secrets["carol"]})
	ops := dialAs(t, addr, client.Security{User: "ops", Secret: secrets["ops"]})
	req := flight.StreamRequest{Queue: "dns.arrow", Instance: "lax", Consumer: "ana-ids"}
	var pr flight.ProcessResult
	if err := ana.StreamAction(ctx, flight.ActProcessNext, req, &pr); err != nil || pr.Seq != 1 {
		t.Fatalf("ana's own consumer: %+v %v", pr, err)
	}
	for _, action := range []flight.Action{flight.ActProcessNext, flight.ActPeekNext, flight.ActCommit, flight.ActSkip, flight.ActPutState, flight.ActCheckpoint, flight.ActGetState, flight.ActDeleteState} {
		r := req
		r.Seq = 1
		if err := carol.StreamAction(ctx, action, r, nil); codeOf(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "belongs to another user, ana") {
			t.Errorf("carol %s on ana's consumer: %v", action.Name, err)
		}
	}
	st, err := carol.Stream(ctx, flight.StreamTicket{Stream: "dns.arrow", Instance: "lax", Consumer: "ana-ids", From: json.RawMessage(`"earliest"`)})
	if err == nil {
		for st.Next() {
		}
		err = st.Err()
		st.Close()
	}
	if codeOf(err) != codes.PermissionDenied {
		t.Errorf("carol streams ana's consumer: %v", err)
	}
	var cs []state.Cursor
	if err := carol.StreamAction(ctx, flight.ActProcessNext, flight.StreamRequest{Queue: "dns.arrow", Instance: "lax", Consumer: "stage-0123456789ab"}, nil); codeOf(err) != codes.PermissionDenied {
		t.Errorf("carol on a stage's consumer: %v", err)
	}
	err = carol.Do(ctx, flight.ActListState, map[string]string{"queue": "dns.arrow"}, func(raw []byte) error {
		var c state.Cursor
		json.Unmarshal(raw, &c)
		cs = append(cs, c)
		return nil
	})
	if err != nil || len(cs) != 0 {
		t.Errorf("carol lists others' consumers: %+v %v", cs, err)
	}
	// Ana's cursor did not move: her commit of seq 1 still works.
	if err := ana.StreamAction(ctx, flight.ActCommit, flight.StreamRequest{Queue: "dns.arrow", Instance: "lax", Consumer: "ana-ids", Seq: 1}, nil); err != nil {
		t.Errorf("ana's commit after carol's tries: %v", err)
	}
	if err := ops.StreamAction(ctx, flight.ActGetState, req, nil); err != nil {
		t.Errorf("an admin reads ana's consumer: %v", err)
	}
	// Ana deletes her consumer; then it is gone, and a stage's is not hers
	// to delete.
	if err := ana.StreamAction(ctx, flight.ActDeleteState, req, nil); err != nil {
		t.Errorf("ana deletes her consumer: %v", err)
	}
	if err := ana.StreamAction(ctx, flight.ActGetState, req, nil); codeOf(err) != codes.NotFound {
		t.Errorf("ana's consumer after delete-state: %v", err)
	}
	if err := ana.StreamAction(ctx, flight.ActDeleteState, flight.StreamRequest{Queue: "dns.arrow", Instance: "lax", Consumer: "stage-0123456789ab"}, nil); codeOf(err) != codes.PermissionDenied {
		t.Errorf("ana deletes a stage's consumer: %v", err)
	}
}

// FuzzOthersGroups: whatever action or ticket carol (an analyst like
// ana) sends, ana's consumer group and stream consumer stay where ana
// left them, and no program gets registered or removed.
func FuzzOthersGroups(f *testing.F) {
	file, secrets := twoAnalysts(f)
	addr := runServer(f, Config{Users: file, Registry: stage.NewRegistry(), MaxVisibility: time.Minute})
	ctx := context.Background()
	agent := dialAgent(f, addr, secrets)
	var names []string
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("20250505-1511%02d-%08d.lax.dns.arrow", i, i)
		if _, err := agent.Put(ctx, bytesSource(n, []byte("rows"))); err != nil {
			f.Fatal(err)
		}
		names = append(names, n)
	}
	ana := dialAs(f, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	carol := dialAs(f, addr, client.Security{User: "carol", Secret: secrets["carol"]})
	ops := dialAs(f, addr, client.Security{User: "ops", Secret: secrets["ops"]})
	// Ana reads the whole group to its end, so no stream of hers is still
	// releasing an unsent block while the fuzzer compares (a peek that
	// hangs up mid-stream leaves that race, and it failed CI once).
	all, err := ana.DoGet(ctx, flight.Ticket{Queue: "dns.arrow", Group: "team", From: "earliest"})
	if err != nil {
		f.Fatal(err)
	}
	for all.Next() {
		io.Copy(io.Discard, all)
	}
	if err := all.Err(); err != nil {
		f.Fatal(err)
	}
	all.Close()
	if n, err := ana.Ack(ctx, "dns.arrow", "team", names[0]); err != nil || n != 1 {
		f.Fatalf("ana acks: %d %v", n, err)
	}
	cur := flight.StreamRequest{Queue: "dns.arrow", Instance: "lax", Consumer: "ids"}
	if err := ana.StreamAction(ctx, flight.ActProcessNext, cur, nil); err != nil {
		f.Fatal(err)
	}
	snapshot := func() string {
		qs, err := ops.QueueStats(ctx, "dns.arrow")
		if err != nil {
			return err.Error()
		}
		var c state.Cursor
		err = ops.StreamAction(ctx, flight.ActGetState, cur, &c)
		ps, _ := ops.Programs(ctx)
		return fmt.Sprintf("%+v next=%d pending=%v state=%v %v programs=%d", qs.Groups, c.Next, c.Pending, c.State, err, len(ps))
	}
	want := snapshot()
	actions := []flight.Action{flight.ActAck, flight.ActLost, flight.ActQueueStats, flight.ActPeekNext, flight.ActProcessNext, flight.ActCommit, flight.ActSkip, flight.ActPutState, flight.ActCheckpoint, flight.ActGetState, flight.ActDeleteState, flight.ActGroupDelete, flight.ActListState, flight.ActProgramAdd, flight.ActProgramRemove, flight.ActSubmitJob, flight.ActRetractJob, flight.ActNack}
	for _, seed := range []string{
		`{"queue":"dns.arrow","group":"team","blocks":["20250505-151102-00000002.lax.dns.arrow"]}`,
		`{"queue":"dns.arrow","instance":"lax","consumer":"ids","seq":1}`,
		`{"queue":"dns.arrow","instance":"lax","consumer":"ids","from":"earliest"}`,
		`{"queue":"dns.arrow","instance":"lax","consumer":"ids","state":{"a":"b"}}`,
		`{"name":"sh","path":"/bin/sh"}`, `{"name":"cat"}`,
		`{"queue":"dns.arrow","group":"team","from":"earliest","visibility":1}`,
		`{"stream":"dns.arrow","instance":"lax","consumer":"ids","from":"earliest"}`,
		`{"window":"dns.arrow","group":"team","spec":{"size":"1h"}}`,
		`{"yaml":"job: j\nstages:\n  - {name: s, inputs: [dns.arrow], program: [/bin/sh], outputs: [dns.x]}\n"}`,
	} {
		for i := range actions {
			f.Add(uint8(i), []byte(seed))
		}
		f.Add(uint8(255), []byte(seed))
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		if int(kind) < len(actions) {
			carol.Do(ctx, actions[kind], json.RawMessage(body), nil)
		} else {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if stream, err := carol.Flight().DoGet(cctx, &aflight.Ticket{Ticket: body}); err == nil {
				for {
					if _, err := stream.Recv(); err != nil {
						break
					}
				}
			}
		}
		if got := snapshot(); got != want {
			t.Fatalf("carol's %d %q changed ana's consumers or the programs:\n got %s\nwant %s", kind, body, got, want)
		}
	})
}

// TestGroupLifecycle: a consumer group pinned the blocks it was owed for
// ever (one ad-hoc follow pinned 268 MB). Its creator or an admin now
// deletes it, and a group unread for --group-idle expires; either way
// retention then frees the blocks. Other users cannot delete it, and a
// stage's group never expires.
func TestGroupLifecycle(t *testing.T) {
	file, secrets := twoAnalysts(t)
	var mu sync.Mutex
	now := time.Date(2025, 5, 5, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	reg := stage.NewRegistry()
	reg.Add(stage.Factory{Name: "copy", New: func(url.Values) (stage.Builtin, error) { return copyBuiltin{}, nil }})
	addr := runServer(t, Config{Users: file, Registry: reg, Now: clock, TokenTTL: 1000 * time.Hour, SweepEvery: 20 * time.Millisecond, GroupIdle: 24 * time.Hour})
	ctx := context.Background()
	agent := dialAgent(t, addr, secrets)
	ana := dialAs(t, addr, client.Security{User: "ana", Secret: secrets["ana"]})
	carol := dialAs(t, addr, client.Security{User: "carol", Secret: secrets["carol"]})
	ops := dialAs(t, addr, client.Security{User: "ops", Secret: secrets["ops"]})
	for i := 1; i <= 3; i++ {
		if _, err := agent.Put(ctx, bytesSource(fmt.Sprintf("20250505-1511%02d-%08d.lax.dns.arrow", i, i), []byte("rows"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.SetRetention(ctx, "dns.arrow", "1h", false); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"peek", "later"} {
		if _, err := peek(ana, "dns.arrow", g, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	blocks := func() int {
		bs, _ := ops.Blocks(ctx, "dns.arrow")
		return len(bs)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testenv.WaitFor(t, 20*time.Second, what, ok)
	}
	advance(2 * time.Hour) // past the retention; the groups still owe the blocks
	time.Sleep(200 * time.Millisecond)
	if n := blocks(); n != 3 {
		t.Fatalf("%d blocks left while two groups owe them", n)
	}
	if err := carol.DeleteGroup(ctx, "dns.arrow", "peek"); codeOf(err) != codes.PermissionDenied {
		t.Errorf("carol deletes ana's group: %v", err)
	}
	if err := ana.DeleteGroup(ctx, "dns.arrow", "nosuch"); codeOf(err) != codes.NotFound || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("deleting a group that does not exist: %v", err)
	}
	if err := ana.DeleteGroup(ctx, "dns.arrow", "peek"); err != nil {
		t.Fatalf("ana deletes her group: %v", err)
	}
	if gs, err := ana.Groups(ctx, "dns.arrow"); err != nil || len(gs) != 1 || gs[0].Group != "later" {
		t.Errorf("ana's groups: %+v %v", gs, err)
	}
	// A job's stage group on a second queue, older than the idle time.
	if _, err := agent.Put(ctx, bytesSource("20250505-151105-00000001.lax.dns.in", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if res, err := ops.SubmitJob(ctx, "j.yaml", []byte("job: j\nstages:\n  - {name: s, inputs: [dns.in], program: builtin:copy, outputs: [dns.out]}\n")); err != nil || res.State != "accepted" {
		t.Fatalf("%+v %v", res, err)
	}
	advance(48 * time.Hour) // "later" idle for two days: it expires, and the blocks go
	waitFor("the idle group to expire and retention to free the blocks", func() bool { return blocks() == 0 })
	if qs, err := ops.QueueStats(ctx, "dns.in"); err != nil || len(qs.Groups) != 1 || !strings.HasPrefix(qs.Groups[0].Group, "stage-") {
		t.Errorf("the stage's group after the idle time: %+v %v", qs.Groups, err)
	}
}

// dialAgent connects as lax-agent with its API key, as an agent does.
func dialAgent(t testing.TB, addr string, secrets map[string]string) *client.Client {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(secrets["key"]), 0o600); err != nil {
		t.Fatal(err)
	}
	return dialAs(t, addr, client.Security{TokenFile: keyFile})
}
