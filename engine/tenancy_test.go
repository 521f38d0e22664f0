package engine_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/engine"
	"github.com/plumb-dev/plumb/jobs"
	"github.com/plumb-dev/plumb/sandbox"
)

// untrusted submits a job as a user who is not an admin.
func (r *rig) untrusted(src string) jobs.SubmitResult {
	r.t.Helper()
	res, err := r.ctl.SubmitChecked("job.yaml", []byte(src), "bob", false, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prog.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJobProblemsInOneAnswer: a job with a problem the parser finds (a
// misspelt field, a window size) and those only the engine finds (the
// unregistered programs) is refused with all four at once, each at its field's line and column, in file order:
// the submitter does not fix one and meet the next on the next submit.
func TestJobProblemsInOneAnswer(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	r.put("bob.in", 1, []byte("x"))
	res := r.untrusted(`job: three
from: earliest
stages:
  - name: a
    inputs: [bob.in]
    program: builtin:decode
    output: [bob.a]
  - name: b
    inputs: [bob.in]
    program: [/bin/sh, -c, id]
  - name: c
    abstraction: window
    window: {size: fortnightly}
    inputs: [bob.in]
    program: [cat]
`)
	want := []string{
		`job.yaml:7:5: stage "a".output: unknown field`,
		`job.yaml:10:14: stage "b".program: program "/bin/sh" is not registered`,
		`job.yaml:13:20: stage "c".window.size: "fortnightly"`,
		`job.yaml:15:14: stage "c".program: program "cat" is not registered`,
	}
	at := 0
	for _, w := range want {
		i := strings.Index(res.Reason[at:], w)
		if i < 0 {
			t.Fatalf("reason lacks %q after what came before (or the order is not the file's):\n%s", w, res.Reason)
		}
		at += i + len(w)
	}
	if res.State != "rejected" {
		t.Errorf("state %s", res.State)
	}
}

// TestUnregisteredExecutableRefused is the attack of issue 17: a user
// who may submit jobs named /bin/sh -c; it must not be accepted unless an
// admin registered the program.
func TestUnregisteredExecutableRefused(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	r.put("bob.in", 1, []byte("x"))
	res := r.untrusted("job: evil\nfrom: earliest\nstages:\n  - {name: s, inputs: [bob.in], program: [/bin/sh, -c, 'cat ../../../auth.key'], outputs: [bob.out]}\n")
	if res.State != "rejected" || !strings.Contains(res.Reason, `job.yaml:4:42: stage "s".program: program "/bin/sh" is not registered`) {
		t.Fatalf("unregistered /bin/sh from a non-admin: %+v", res)
	}
	if res := r.untrusted("job: evil2\nstages:\n  - {name: s, inputs: [bob.in], program: [sh, -c, id], outputs: [bob.out]}\n"); res.State != "rejected" || !strings.Contains(res.Reason, `program "sh" is not registered`) {
		t.Fatalf("unregistered sh by name: %+v", res)
	}
	if jobs, _ := r.ctl.Jobs(); len(jobs) != 0 {
		t.Errorf("rejected jobs were stored: %+v", jobs)
	}
	// Registered, the same user may run it, and only by its name.
	if _, err := r.eng.AddProgram("upper", "/usr/bin/tr", "", false, "admin"); err != nil {
		t.Fatal(err)
	}
	if res := r.untrusted("job: ok\nfrom: earliest\nstages:\n  - {name: s, inputs: [bob.in], program: [upper, a-z, A-Z], outputs: [bob.out], retention: forever}\n"); res.State != "accepted" {
		t.Fatalf("registered program: %+v", res)
	}
	r.wait("the registered program's output", func() bool { return r.count("bob.out") == 1 })
	if got := string(r.read("bob.out", 1)); got != "X" {
		t.Errorf("output %q", got)
	}
	// A registered program cannot be removed under a job that runs it.
	if err := r.eng.RemoveProgram("upper"); err == nil || !strings.Contains(err.Error(), "run by job(s) ok") {
		t.Errorf("remove a program in use: %v", err)
	}
	// Network is the admin's to give.
	if res := r.untrusted("job: net\nstages:\n  - {name: s, inputs: [bob.in], program: [upper, a, b], outputs: [bob.net], network: true}\n"); res.State != "rejected" || !strings.Contains(res.Reason, "not allowed the network") {
		t.Errorf("network without the admin's leave: %+v", res)
	}
	// A wrong checksum is refused at registration.
	if _, err := r.eng.AddProgram("cat2", "/usr/bin/cat", strings.Repeat("0", 64), false, "admin"); err == nil || !strings.Contains(err.Error(), "not the 0000") {
		t.Errorf("wrong checksum: %v", err)
	}
}

// TestConfinedStage runs a registered program that tries what the
// tenant of issue 17 did, and more: read the server's data directory,
// another run's scratch, the network, other processes. None of it works;
// the run's own input and output do.
func TestConfinedStage(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 2})
	os.WriteFile(filepath.Join(r.dir, "auth.key"), []byte("SECRET-SIGNING-KEY"), 0o600)
	os.WriteFile(filepath.Join(r.dir, "users.yaml"), []byte("users: {carol: {}}"), 0o600)
	other := filepath.Join(r.dir, "tmp", "run-other", "work")
	os.MkdirAll(other, 0o700)
	os.WriteFile(filepath.Join(other, "scratch"), []byte("another run's bytes"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("NETWORK-REACHED"))
			c.Close()
		}
	}()
	spy := writeScript(t, fmt.Sprintf(`
cat ../../auth.key ../../../auth.key %[1]s/auth.key %[1]s/users.yaml %[2]s/scratch 2>&1
ls %[1]s 2>&1
python3 -c 'import socket; print(socket.create_connection(("127.0.0.1", %[3]d), timeout=2).recv(100))' 2>&1 | tail -1
kill -9 %[4]d 2>&1 && echo KILLED-THE-SERVER
echo "uid $(id -u)"
echo "input: $(cat)"
`, r.dir, other, ln.Addr().(*net.TCPAddr).Port, os.Getpid()))
	if _, err := r.eng.AddProgram("spy", spy, "", false, "admin"); err != nil {
		t.Fatal(err)
	}
	r.put("bob.in", 1, []byte("my own block"))
	if res := r.untrusted("job: spy\nfrom: earliest\nstages:\n  - {name: s, inputs: [bob.in], program: [spy], outputs: [bob.out], retention: forever}\n"); res.State != "accepted" {
		t.Fatalf("%+v", res)
	}
	r.wait("the spy's output", func() bool { return r.count("bob.out") == 1 })
	out := string(r.read("bob.out", 1))
	for _, leak := range []string{"SECRET", "carol", "another run", "NETWORK-REACHED", "KILLED", "uid 0\n"} {
		if strings.Contains(out, leak) {
			t.Errorf("the confined program got %q:\n%s", leak, out)
		}
	}
	for _, want := range []string{"No such file", "input: my own block"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestHostileStagesContained: a fork bomb and a memory hog fail their
// runs, end FAULTY after their attempts, and a neighbour stage goes on.
func TestHostileStagesContained(t *testing.T) {
	lim := sandbox.DefaultLimits()
	lim.Memory, lim.Procs = 512<<20, 64
	sb, err := sandbox.New(context.Background(), sandbox.Config{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, engine.Config{Slots: 3, MaxAttempts: 2, Sandbox: sb})
	bomb := writeScript(t, "bomb() { bomb | bomb & }; bomb; sleep 60\n")
	hog := writeScript(t, "exec python3 -c 'b = bytearray(3 << 30); print(len(b))'\n")
	for name, p := range map[string]string{"bomb": bomb, "hog": hog, "copy": "/usr/bin/cat"} {
		if _, err := r.eng.AddProgram(name, p, "", false, "admin"); err != nil {
			t.Fatal(err)
		}
	}
	r.put("in", 1, []byte("one"))
	r.put("in", 2, []byte("two"))
	for _, job := range []string{
		"job: bomb\nfrom: earliest\nstages:\n  - {name: s, inputs: [in], program: [bomb], outputs: [in.bomb], timeout: 2s}\n",
		"job: hog\nfrom: earliest\nstages:\n  - {name: s, inputs: [in], program: [hog], outputs: [in.hog]}\n",
		"job: copy\nfrom: earliest\nstages:\n  - {name: s, inputs: [in], program: [copy], outputs: [in.copy], retention: forever}\n",
	} {
		if res := r.untrusted(job); res.State != "accepted" {
			t.Fatalf("%+v", res)
		}
	}
	r.wait("the neighbour's outputs", func() bool { return r.count("in.copy") == 2 })
	r.wait("both hostile stages faulty on both blocks", func() bool {
		fb, err := r.db.Faulty("in")
		return err == nil && len(fb) == 4
	})
	fb, _ := r.db.Faulty("in")
	for _, f := range fb {
		t.Logf("faulty: %s %s: %s", f.Group, f.Block, f.Error)
		if f.Attempts != 2 {
			t.Errorf("%s: %d attempts", f.Block, f.Attempts)
		}
	}
	if r.count("in.bomb")+r.count("in.hog") != 0 {
		t.Errorf("a hostile stage published output")
	}
}

// TestJobsAreBounded: a user's job files cannot fill the metadata (issue
// 17 stored 296 MiB of rejected sources in 3.6 s): a file over 256 KiB
// is refused before parsing, rejected jobs leave nothing behind, and one
// owner's accepted jobs are capped.
func TestJobsAreBounded(t *testing.T) {
	r := newRig(t, engine.Config{Slots: 1})
	r.stop()
	r.jobsCfg = jobs.Config{MaxPerOwner: 3}
	r.start(engine.Config{Slots: 1})
	r.put("bob.in", 1, []byte("x"))
	big := "job: big\nstages:\n  - {name: s, inputs: [bob.in], program: builtin:copy, outputs: [bob.o]}\n#" + strings.Repeat("x", 300<<10) + "\n"
	if res := r.untrusted(big); res.State != "rejected" || !strings.Contains(res.Reason, "larger than 262144 bytes") {
		t.Errorf("a 300 KiB job: %+v", truncated(res))
	}
	for i := range 3 {
		if res := r.untrusted(fmt.Sprintf("job: j%d\nstages:\n  - {name: s%d, inputs: [bob.in], program: [cat], outputs: [bob.o%d]}\n", i, i, i)); res.State != "rejected" {
			t.Fatalf("unregistered cat: %+v", res)
		}
	}
	if jobs, _ := r.ctl.Jobs(); len(jobs) != 0 {
		t.Fatalf("rejected jobs were stored: %d", len(jobs))
	}
	if _, err := r.eng.AddProgram("cat", "/usr/bin/cat", "", false, "admin"); err != nil {
		t.Fatal(err)
	}
	job := func(i int) string {
		return fmt.Sprintf("job: j%d\nstages:\n  - {name: s%d, inputs: [bob.in], program: [cat], outputs: [bob.o%d]}\n", i, i, i)
	}
	for i := range 3 {
		if res := r.untrusted(job(i)); res.State != "accepted" {
			t.Fatalf("job %d: %+v", i, res)
		}
	}
	if res := r.untrusted(job(3)); res.State != "rejected" || !strings.Contains(res.Reason, "user bob has 3 accepted jobs") {
		t.Errorf("a fourth job: %+v", res)
	}
	if res := r.untrusted(job(1)); res.State != "accepted" {
		t.Errorf("replacing one of the three: %+v", res)
	}
	// Another user is not held back by bob's.
	if res, err := r.ctl.SubmitChecked("job.yaml", []byte(job(9)), "carol", false, nil); err != nil || res.State != "accepted" {
		t.Errorf("carol's first job: %+v %v", res, err)
	}
}

func truncated(res jobs.SubmitResult) jobs.SubmitResult {
	if len(res.Reason) > 300 {
		res.Reason = res.Reason[:300]
	}
	return res
}
