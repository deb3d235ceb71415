package gitboundary

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// attrWrites tries, in dir, every way LimitAgent closes, and returns what
// each said: a user attribute set and removed on a file, a default ACL
// set on a directory (path and descriptor calls), an io_uring made, and,
// in a program this process runs, the same default ACL set again.
func attrWrites(dir string) map[string]error {
	f := filepath.Join(dir, "f")
	_ = os.WriteFile(f, []byte("f"), 0o644)
	def := acl{{tag: tagUserObj, perm: 7, id: undefinedID}, {tag: tagGroupObj, perm: 5, id: undefinedID}, {tag: tagOther, perm: 5, id: undefinedID}, {tag: tagUser, perm: 7, id: testAgent}, {tag: tagMask, perm: 7, id: undefinedID}}.encode()
	got := map[string]error{
		"setxattr":      unix.Setxattr(f, "user.ohd", []byte("x"), 0),
		"lsetxattr":     unix.Lsetxattr(dir, xattrDefault, def, 0),
		"removexattr":   unix.Removexattr(f, "user.ohd"),
		"lremovexattr":  unix.Lremovexattr(dir, xattrDefault),
		"readxattr":     nil,
		"io_uring":      nil,
		"child-setattr": nil,
	}
	if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
		got["fsetxattr"] = unix.Fsetxattr(fd, xattrDefault, def, 0)
		unix.Close(fd)
	}
	if _, err := unix.Getxattr(f, "user.none", make([]byte, 16)); err != nil && !errors.Is(err, unix.ENODATA) {
		got["readxattr"] = err
	}
	params := make([]byte, 120)
	if fd, _, errno := unix.Syscall(425, 1, uintptr(unsafe.Pointer(&params[0])), 0); errno != 0 {
		got["io_uring"] = errno
	} else {
		unix.Close(int(fd))
	}
	// A program run from here: the filter is inherited.
	out, err := exec.Command(os.Args[0], "-test.run=^TestLimitAgentChildSetsAttr$", "-test.v").CombinedOutput()
	switch {
	case strings.Contains(string(out), unix.EOPNOTSUPP.Error()):
		got["child-setattr"] = unix.EOPNOTSUPP
	case err != nil || !strings.Contains(string(out), "PASS"):
		got["child-setattr"] = errors.New(strings.Join(strings.Fields(string(out)), " "))
	}
	return got
}

// TestLimitAgentChildSetsAttr is run by attrWrites in a child process:
// it passes when it can set a user attribute.
func TestLimitAgentChildSetsAttr(t *testing.T) {
	dir := os.Getenv("OHD_LIMIT_DIR")
	if dir == "" {
		t.Skip("run by TestLimitAgent")
	}
	if err := unix.Setxattr(filepath.Join(dir, "f"), "user.child", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
}

// TestLimitAgentChild is TestLimitAgent's child: it limits itself (with
// OHD_LIMIT_APPLY=1) and reports what each write said.
func TestLimitAgentChild(t *testing.T) {
	dir := os.Getenv("OHD_LIMIT_DIR")
	if dir == "" {
		t.Skip("run by TestLimitAgent")
	}
	if os.Getenv("OHD_LIMIT_APPLY") == "1" {
		if err := LimitAgent(); err != nil {
			t.Fatal(err)
		}
	}
	for name, err := range attrWrites(dir) {
		t.Logf("RESULT %s=%v", name, err)
	}
}

// TestLimitAgent: after LimitAgent a process (every thread of it, and a
// program it runs) can neither set nor remove an attribute (EOPNOTSUPP),
// so an agent cannot give itself a directory's default ACL, nor make an
// io_uring (ENOSYS); it still reads attributes. The control: the same
// calls without the filter succeed.
func TestLimitAgent(t *testing.T) {
	needRoot(t)
	run := func(apply string) map[string]string {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestLimitAgentChild$", "-test.v")
		cmd.Env = append(os.Environ(), "OHD_LIMIT_DIR="+dir, "OHD_LIMIT_APPLY="+apply)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		got := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			if _, kv, ok := strings.Cut(l, "RESULT "); ok {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = v
			}
		}
		if len(got) != 8 {
			t.Fatalf("the child reported %v, want 8 results\n%s", got, out)
		}
		return got
	}
	for name, v := range run("0") {
		if v != "<nil>" {
			t.Errorf("control: %s without the filter = %s, want it to succeed", name, v)
		}
	}
	want := map[string]string{
		"setxattr": unix.EOPNOTSUPP.Error(), "lsetxattr": unix.EOPNOTSUPP.Error(), "fsetxattr": unix.EOPNOTSUPP.Error(),
		"removexattr": unix.EOPNOTSUPP.Error(), "lremovexattr": unix.EOPNOTSUPP.Error(),
		"io_uring": unix.ENOSYS.Error(), "readxattr": "<nil>",
	}
	got := run("1")
	for name, w := range want {
		if got[name] != w {
			t.Errorf("with the filter: %s = %s, want %s", name, got[name], w)
		}
	}
	if !strings.Contains(got["child-setattr"], "operation not supported") {
		t.Errorf("with the filter: a program the process runs set an attribute (%s): the filter is not inherited", got["child-setattr"])
	}
}

// TestLimitProgramFitsEveryArch: the filter builds for every arch that
// has one, within BPF's jump range.
func TestLimitProgramFitsEveryArch(t *testing.T) {
	for arch := range abis {
		if _, err := limitProgram(arch); err != nil {
			t.Errorf("%s: %v", arch, err)
		}
	}
	if _, err := limitProgram("mips"); err == nil {
		t.Error("limitProgram(mips) = nil error, want a refusal")
	}
}
