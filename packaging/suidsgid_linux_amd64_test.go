package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// restrictSUIDSGIDEnv makes the test binary a launcher: it installs a
// seccomp filter like systemd's RestrictSUIDSGID=yes (chmod, fchmod and
// fchmodat with a set-uid or set-gid bit fail with EPERM) and execs its
// arguments under it.
const restrictSUIDSGIDEnv = "OHD_TEST_RESTRICT_SUIDSGID"

func init() {
	if os.Getenv(restrictSUIDSGIDEnv) != "1" {
		return
	}
	// The filter belongs to this thread; exec keeps it.
	runtime.LockOSThread()
	deny := func(err error) {
		os.Stderr.WriteString("restrict-suid-sgid launcher: " + err.Error() + "\n")
		os.Exit(127)
	}
	const (
		ldAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret    = unix.BPF_RET | unix.BPF_K
		offNr  = 0
		offArc = 4
		offArg = 16 // seccomp_data.args[0]; each 8 bytes, low word first
		suid   = 0o6000
	)
	filter := []unix.SockFilter{
		/* 0 */ {Code: ldAbs, K: offArc},
		/* 1 */ {Code: jeq, K: unix.AUDIT_ARCH_X86_64, Jt: 0, Jf: 4}, // → 6
		/* 2 */ {Code: ldAbs, K: offNr},
		/* 3 */ {Code: jeq, K: unix.SYS_CHMOD, Jt: 3}, // → 7
		/* 4 */ {Code: jeq, K: unix.SYS_FCHMOD, Jt: 2}, // → 7
		/* 5 */ {Code: jeq, K: unix.SYS_FCHMODAT, Jt: 4}, // → 10
		/* 6 */ {Code: ret, K: unix.SECCOMP_RET_ALLOW},
		/* 7 */ {Code: ldAbs, K: offArg + 8*1},
		/* 8 */ {Code: jset, K: suid, Jt: 4}, // → 13
		/* 9 */ {Code: ret, K: unix.SECCOMP_RET_ALLOW},
		/* 10 */ {Code: ldAbs, K: offArg + 8*2},
		/* 11 */ {Code: jset, K: suid, Jt: 1}, // → 13
		/* 12 */ {Code: ret, K: unix.SECCOMP_RET_ALLOW},
		/* 13 */ {Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		deny(err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		deny(err)
	}
	path, err := exec.LookPath(os.Args[1])
	if err != nil {
		deny(err)
	}
	deny(syscall.Exec(path, os.Args[1:], os.Environ()))
}

// TestServiceAllowsSharedRepositories shows why ohd.service does not set
// RestrictSUIDSGID=yes (it would lower systemd-analyze's exposure by 0.2):
// git keeps the set-gid bit on the directories of a shared repository
// (core.sharedRepository), so under that filter ohd's host-side `git
// worktree add` fails in every such repository, while it works in the
// others.
func TestServiceAllowsSharedRepositories(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git not found")
	}
	git := func(restricted bool, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command("git", args...)
		if restricted {
			cmd = exec.Command(os.Args[0], append([]string{"git"}, args...)...)
			cmd.Env = append(os.Environ(), restrictSUIDSGIDEnv+"=1")
		}
		cmd.Env = append(cmd.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(),
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	worktreeAdd := func(shared bool) error {
		t.Helper()
		repo := filepath.Join(t.TempDir(), "repo")
		initArgs := []string{"init", "-q", "-b", "main", repo}
		if shared {
			initArgs = []string{"init", "-q", "-b", "main", "--shared=group", repo}
		}
		for _, args := range [][]string{initArgs, {"-C", repo, "commit", "-q", "--allow-empty", "-m", "first"}} {
			if out, err := git(false, args...); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		out, err := git(true, "-C", repo, "worktree", "add", "-q", "-b", "openhands/x", filepath.Join(filepath.Dir(repo), "wt"))
		if err != nil {
			t.Logf("shared=%v: git worktree add under the filter: %v\n%s", shared, err, out)
		}
		return err
	}
	if err := worktreeAdd(false); err != nil {
		t.Fatalf("the filter breaks git worktree add in an ordinary repository: the check below proves nothing")
	}
	if err := worktreeAdd(true); err == nil {
		t.Fatalf("git worktree add in a shared repository works under RestrictSUIDSGID's filter: the unit could set it")
	}
	svc := parseUnit(t, "systemd/ohd.service")
	if v := svc["Service"]["RestrictSUIDSGID"]; len(v) > 0 && !strings.EqualFold(v[len(v)-1], "no") && v[len(v)-1] != "false" && v[len(v)-1] != "0" {
		t.Errorf("ohd.service sets RestrictSUIDSGID=%s: ohd could not create worktrees in shared repositories", v[len(v)-1])
	}
}
