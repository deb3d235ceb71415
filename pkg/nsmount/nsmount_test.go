package nsmount

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inNamespace starts a process in a mount namespace of its own (as a
// container's init is) and returns its pid.
func inNamespace(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: joins and mounts in another mount namespace")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// unshare execs sleep once the namespace is made and its mounts are
	// private (before that a mount there would propagate back here).
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for i := 0; i < 100; i++ {
		p := "/proc/" + strconv.Itoa(cmd.Process.Pid)
		ns, _ := os.Readlink(p + "/ns/mnt")
		comm, _ := os.ReadFile(p + "/comm")
		if ns != "" && ns != self && strings.TrimSpace(string(comm)) == "sleep" {
			return cmd.Process.Pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("unshare made no mount namespace")
	return 0
}

// mountOf returns the mount options of the mount at path in pid's
// namespace ("" when path is no mount point there).
func mountOf(t *testing.T, pid, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == path {
			return f[5]
		}
	}
	return ""
}

// TestBindPinsInTheNamespaceOnly: a directory bound onto itself in the
// other namespace is a mount point there (a rename of it fails there with
// EBUSY), a file bound read-only is read-only there, and the caller's own
// namespace has neither mount.
func TestBindPinsInTheNamespaceOnly(t *testing.T) {
	pid := inNamespace(t)
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	dotGit := filepath.Join(sub, ".git")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dotGit, []byte("gitdir: ../x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Bind(pid, []Mount{{Source: sub, Target: sub}, {Source: dotGit, Target: dotGit, ReadOnly: true}}); err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(pid)
	if o := mountOf(t, p, sub); o == "" || strings.HasPrefix(o, "ro") {
		t.Errorf("%s in the namespace: mount options %q, want a read-write mount point", sub, o)
	}
	if o := mountOf(t, p, dotGit); !strings.HasPrefix(o, "ro") {
		t.Errorf("%s in the namespace: mount options %q, want a read-only mount", dotGit, o)
	}
	if o := mountOf(t, "self", sub) + mountOf(t, "self", dotGit); o != "" {
		t.Errorf("the caller's namespace got the mounts (%q)", o)
	}
	// In the namespace the pinned directory cannot be renamed, the
	// read-only file cannot be written.
	out, err := exec.Command("nsenter", "-t", p, "-m", "sh", "-c", "mv "+sub+" "+sub+".moved; echo x >> "+dotGit).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "busy") || !strings.Contains(string(out), "Read-only") {
		t.Errorf("in the namespace, mv of the pin and a write of the read-only file = %v, %q; want EBUSY and EROFS", err, out)
	}
	// On the host both are as they were: the rename works.
	if err := os.Rename(sub, sub+".moved"); err != nil {
		t.Errorf("the host's own rename of %s: %v", sub, err)
	}
}

// TestBindRefusesASymlink: a path that is a symlink in the namespace is
// not followed.
func TestBindRefusesASymlink(t *testing.T) {
	pid := inNamespace(t)
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := Bind(pid, []Mount{{Source: dir, Target: filepath.Join(dir, "link")}}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Bind of a symlink = %v, want a refusal", err)
	}
	if o := mountOf(t, strconv.Itoa(pid), "/etc"); o != "" && mountOf(t, "self", "/etc") == "" {
		t.Errorf("/etc was mounted in the namespace")
	}
}

// TestBindAHostPathTheNamespaceShadows: in the namespace another mount
// hides the host's directory (as a conversation's git view hides the
// repository's .git); the host's modules/ is mounted there all the same,
// its mount point made, read-only.
func TestBindAHostPathTheNamespaceShadows(t *testing.T) {
	pid := inNamespace(t)
	p := strconv.Itoa(pid)
	dir := t.TempDir()
	modules := filepath.Join(dir, "modules")
	if err := os.MkdirAll(modules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, "HEAD"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nsenter", "-t", p, "-m", "mount", "-t", "tmpfs", "view", dir).CombinedOutput(); err != nil {
		t.Fatalf("shadow %s in the namespace: %v %s", dir, err, out)
	}
	if err := Bind(pid, []Mount{{Source: modules, Target: modules, ReadOnly: true}}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nsenter", "-t", p, "-m", "sh", "-c", "cat "+modules+"/HEAD; echo x > "+modules+"/HEAD").CombinedOutput()
	if !strings.Contains(string(out), "host") || err == nil || !strings.Contains(string(out), "Read-only") {
		t.Errorf("in the namespace, the host's modules/HEAD read and written = %v, %q; want its content and EROFS", err, out)
	}
}
