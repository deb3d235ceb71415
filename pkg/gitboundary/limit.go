package gitboundary

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LimitAgent keeps the calling process, every thread of it and everything
// it runs from then on from writing or removing extended attributes (and
// so ACLs): ohd's in-container helper calls it before it starts the agent
// server (ohctl inner-exec), on top of the engine's own seccomp profile
// (filters stack; the strictest answer wins).
//
// Why: every directory the agent writes in is the agent's (lent to it, or
// made by it), and the owner of a directory may set its default ACL. An
// agent that gave itself an entry in a directory's default ACL would get
// write access to the next directory the user makes there, which the user
// owns: one it could fill as an implicit bare repository before ohd lends
// it (measured: the user's git log there ran the agent's program). With
// the attributes out of its reach, what the user makes gets ohd's default
// ACL, which gives the agent nothing (defaultACL).
//
// The filter answers EOPNOTSUPP to setxattr, lsetxattr, fsetxattr,
// removexattr, lremovexattr, fremovexattr, setxattrat and removexattrat
// (what a filesystem without attributes says: cp -a, tar and rsync go on
// without them), ENOSYS to io_uring_setup, io_uring_enter and
// io_uring_register (io_uring can set attributes; programs fall back to
// plain calls), and ENOSYS to every call of an ABI that is not the
// process's own or its compat ABI (x32, and any other), whose numbers it
// does not know. Reading attributes is untouched.
func LimitAgent() error {
	prog, err := limitProgram(runtime.GOARCH)
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("limit the agent: no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC: every thread of the Go runtime at once.
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("limit the agent: install the seccomp filter: %w", errno)
	}
	return nil
}

// The filter's answers.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retNoAttr = unix.SECCOMP_RET_ERRNO | uint32(unix.EOPNOTSUPP)
	retNoSys  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// abi is one system call ABI: its audit arch and the numbers the filter
// answers, with the answer.
type abi struct {
	arch uint32
	// x32 is the bit that marks the x32 ABI's calls under the x86-64
	// audit arch (0 for none): every such call is refused.
	x32   uint32
	calls map[uint32]uint32
}

// xattrCalls and uringCalls name the numbers of each ABI, in the order
// setxattr, lsetxattr, fsetxattr, removexattr, lremovexattr,
// fremovexattr (then setxattrat 463 and removexattrat 466, the same in
// every ABI); io_uring_setup, io_uring_enter and io_uring_register are
// 425-427 in every ABI.
func newABI(arch, x32 uint32, xattr [6]uint32) abi {
	a := abi{arch: arch, x32: x32, calls: map[uint32]uint32{463: retNoAttr, 466: retNoAttr, 425: retNoSys, 426: retNoSys, 427: retNoSys}}
	for _, n := range xattr {
		a.calls[n] = retNoAttr
	}
	return a
}

// abis are, per GOARCH, the native ABI and its compat ABI (the kernel's
// arch/*/entry/syscalls tables).
var abis = map[string][]abi{
	"amd64": {
		newABI(unix.AUDIT_ARCH_X86_64, 0x40000000, [6]uint32{188, 189, 190, 197, 198, 199}),
		newABI(unix.AUDIT_ARCH_I386, 0, [6]uint32{226, 227, 228, 235, 236, 237}),
	},
	"arm64": {
		newABI(unix.AUDIT_ARCH_AARCH64, 0, [6]uint32{5, 6, 7, 14, 15, 16}),
		newABI(unix.AUDIT_ARCH_ARM, 0, [6]uint32{226, 227, 228, 235, 236, 237}),
	},
}

// seccomp_data's offsets: the call's number and its audit arch.
const (
	offNr   = 0
	offArch = 4
)

// limitProgram is LimitAgent's filter for goarch.
func limitProgram(goarch string) ([]unix.SockFilter, error) {
	list, ok := abis[goarch]
	if !ok {
		return nil, errors.New("limit the agent: no seccomp filter for " + goarch + " (amd64 and arm64 have one)")
	}
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	ret := func(v uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: v} }
	// Each ABI's section: the number loaded, each call compared and
	// answered, everything else allowed.
	var sections [][]unix.SockFilter
	for _, a := range list {
		s := []unix.SockFilter{ld(offNr)}
		if a.x32 != 0 {
			// jset x32: refuse; else go on.
			s = append(s, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: a.x32, Jt: 0, Jf: 1}, ret(retNoSys))
		}
		for _, nr := range slices.Sorted(maps.Keys(a.calls)) {
			s = append(s, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nr, Jt: 0, Jf: 1}, ret(a.calls[nr]))
		}
		sections = append(sections, append(s, ret(retAllow)))
	}
	// The dispatch: the arch loaded, one comparison and jump per ABI, and
	// any other ABI refused.
	prog := []unix.SockFilter{ld(offArch)}
	head := 1 + 2*len(list) + 1 // the dispatch's length
	at := head
	for i, a := range list {
		// jeq arch: next (the ja), else skip it.
		ja := uint32(at - (1 + 2*i + 2)) // from after the ja to the section
		prog = append(prog,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: a.arch, Jt: 0, Jf: 1},
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA, K: ja})
		at += len(sections[i])
	}
	prog = append(prog, ret(retNoSys))
	for _, s := range sections {
		prog = append(prog, s...)
	}
	if len(prog) > 255 {
		return nil, errors.New("limit the agent: the seccomp filter is too long")
	}
	return prog, nil
}
