//go:build linux && (amd64 || arm64)

package sandbox

import (
	"encoding/binary"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccomp_data offsets (linux/seccomp.h): nr, arch, then the arguments.
const (
	offNR   = 0
	offArch = 4
	offArg0 = 16
)

const (
	retAllow = 0x7fff0000 // SECCOMP_RET_ALLOW
	retKill  = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	retErrno = 0x00050000 // SECCOMP_RET_ERRNO, errno in the low bits
)

// denied are the system calls a stage program has no use for and an
// escape would: debugging other processes, loading kernel code, mounts
// and namespaces, keyrings, BPF, perf, io_uring, changing the clock.
// They fail with EPERM rather than killing, so a library that probes one
// (as glibc does with clone3) goes on.
var denied = append([]uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_PIDFD_GETFD, unix.SYS_KCMP,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_FSOPEN, unix.SYS_FSMOUNT,
	unix.SYS_FSCONFIG, unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS, unix.SYS_UNSHARE,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT, unix.SYS_QUOTACTL,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_SYSLOG, unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_VHANGUP, unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}, archDenied...)

// nsFlags are clone flags that make new namespaces: a program may start
// processes and threads, not namespaces of its own.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// filter assembles the seccomp program bwrap loads before it runs the
// stage program: another architecture's calls kill the process (their
// numbers mean other things), the denied calls fail with EPERM, clone
// with namespace flags fails with EPERM, clone3 with ENOSYS (its flags
// sit in memory a filter cannot read, and libc then falls back to
// clone), everything else is allowed.
func filter() ([]byte, error) {
	eperm := bpf.RetConstant{Val: retErrno | uint32(unix.EPERM)}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNR, Size: 4},
	}
	if x32Bit != 0 { // the x32 ABI shares the arch value: refuse it whole
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: retKill})
	}
	for _, nr := range denied {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1}, eperm)
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipFalse: 1},
		bpf.RetConstant{Val: retErrno | uint32(unix.ENOSYS)},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE, SkipFalse: 3},
		bpf.LoadAbsolute{Off: offArg0, Size: 4}, // the flags' low word
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: nsFlags, SkipFalse: 1},
		eperm,
		bpf.RetConstant{Val: retAllow},
	)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	// struct sock_filter, as bwrap --seccomp reads it: u16 code, u8 jt,
	// u8 jf, u32 k, in the machine's byte order.
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}
