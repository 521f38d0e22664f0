package sandbox_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/sandbox"
)

// TestUnderServiceUnits: the server and worker units in deploy/systemd
// run Plumb as an unprivileged user under a system call filter, and the
// filter is inherited by everything the server starts. There, a
// sandboxed run is bubblewrap in a user namespace, which mounts, pivots
// and sets a hostname. No systemd runs here, so the test traces such a
// run made by a non-root server (strace -f over the whole process tree)
// and checks that every call that succeeded is one the units allow: a
// call outside the filter would fail with EPERM under systemd and every
// exec stage with it.
func TestUnderServiceUnits(t *testing.T) {
	if os.Getenv("PLUMB_SANDBOX_AS_SERVICE") != "" {
		runAsService(t)
		return
	}
	strace := testenv.Tool(t, "strace")
	analyze := testenv.Tool(t, "systemd-analyze")

	// The test binary runs again as nobody, so it must be where nobody
	// can read it.
	dir, err := os.MkdirTemp("", "plumb-unit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	copyFile(t, os.Args[0], bin)
	trace := filepath.Join(dir, "trace")
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil { // past the umask
		t.Fatal(err)
	}

	args := []string{"-f", "-qq", "-o", trace}
	if os.Geteuid() == 0 {
		args = append(args, testenv.Tool(t, "setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", "--")
	}
	args = append(args, bin, "-test.run=^TestUnderServiceUnits$", "-test.v")
	cmd := testenv.Command(t, 2*time.Minute, strace, args...)
	cmd.Env = append(os.Environ(), "PLUMB_SANDBOX_AS_SERVICE=1", "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ran confined") {
		t.Fatalf("a non-root server's sandboxed run failed: %v\n%s", err, out)
	}
	used := succeededCalls(t, trace)
	if !used["mount"] || !used["pivot_root"] {
		t.Fatalf("the trace shows no mount or pivot_root; it did not trace bubblewrap:\n%v", used)
	}

	for _, unit := range []string{"plumb-server.service", "plumb-worker.service"} {
		allowed := unitFilter(t, analyze, filepath.Join("..", "deploy", "systemd", unit))
		var denied []string
		for call := range used {
			if !allowed[call] {
				denied = append(denied, call)
			}
		}
		slices.Sort(denied)
		if len(denied) > 0 {
			t.Errorf("%s: its SystemCallFilter= denies %v, which a sandboxed run made", unit, denied)
		}
	}
}

// runAsService is the traced side: a server that is not root confines
// a shell.
func runAsService(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Fatal("the traced side runs as root; the test wants the unprivileged path")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.Config{Limits: sandbox.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, sb, sandbox.Run{}, "echo ran $((6*7)) > out && cat out && echo confined")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Log(strings.Join(strings.Fields(strings.ReplaceAll(out, "42", "")), " "))
}

// succeededCalls reads strace -f output and returns the system calls
// that returned without error at least once; a call that failed anyway
// loses nothing when a filter refuses it too.
func succeededCalls(t *testing.T, trace string) map[string]bool {
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// "123 openat(AT_FDCWD, ...) = 3" or "123 <... read resumed>...) = 5";
	// exit and exit_group return nothing ("= ?") and are always allowed.
	line := regexp.MustCompile(`^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)(?:\(| resumed>).*\)\s+=\s+(\d+|0x[0-9a-f]+)`)
	used := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			used[m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return used
}

// unitFilter returns the system calls a unit's SystemCallFilter= lines
// allow: the union of its allow lists less the union of its deny lists
// ("~"), with systemd's groups expanded by systemd-analyze.
func unitFilter(t *testing.T, analyze, unit string) map[string]bool {
	raw, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	allow, deny := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), "SystemCallFilter=")
		if !ok {
			continue
		}
		into := allow
		if v, ok = strings.CutPrefix(v, "~"); ok {
			into = deny
		}
		for _, name := range strings.Fields(v) {
			for call := range expand(t, analyze, name, map[string]bool{}) {
				into[call] = true
			}
		}
	}
	if len(allow) == 0 {
		t.Fatalf("%s has no SystemCallFilter= allow list", unit)
	}
	for call := range deny {
		delete(allow, call)
	}
	return allow
}

// expand turns a system call or an @group into the calls it names.
func expand(t *testing.T, analyze, name string, seen map[string]bool) map[string]bool {
	out := map[string]bool{}
	if !strings.HasPrefix(name, "@") {
		out[name] = true
		return out
	}
	if seen[name] {
		return out
	}
	seen[name] = true
	list, err := testenv.Command(t, time.Minute, analyze, "syscall-filter", "--no-pager", name).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
	}
	for _, l := range strings.Split(string(list), "\n")[1:] {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for call := range expand(t, analyze, l, seen) {
			out[call] = true
		}
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
