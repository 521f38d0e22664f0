package testenv

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Command is exec.Command for tests, bounded: when the test ends or
// timeout passes, the command's whole process group gets SIGQUIT (a Go
// program then prints every goroutine's stack, so a hang says where it
// hangs), and SIGKILL 10 s later. Waiting never blocks on a grandchild
// that kept the output pipe open. Without it one stuck subprocess holds
// the test binary until `go test -timeout`, and the report names no test.
func Command(t testing.TB, timeout time.Duration, name string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pid := cmd.Process.Pid
		syscall.Kill(-pid, syscall.SIGQUIT)
		time.AfterFunc(10*time.Second, func() { syscall.Kill(-pid, syscall.SIGKILL) })
		return nil
	}
	cmd.WaitDelay = 15 * time.Second
	return cmd
}
