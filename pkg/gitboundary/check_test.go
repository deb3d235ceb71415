package gitboundary

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/pkg/hardgit"
)

func TestParseGitVersion(t *testing.T) {
	tests := []struct {
		in   string
		want [3]int
		ok   bool
		old  bool
	}{
		{"git version 2.39.5", [3]int{2, 39, 5}, true, false},
		{"git version 2.35.2", [3]int{2, 35, 2}, true, false},
		{"git version 2.35.1", [3]int{2, 35, 1}, true, true},
		{"git version 2.34.8.windows.1", [3]int{2, 34, 8}, true, true},
		{"git version 2.37.1 (Apple Git-137.1)", [3]int{2, 37, 1}, true, false},
		{"git version 2.45", [3]int{2, 45, 0}, true, false},
		{"hg version 1", [3]int{}, false, false},
		{"git version x.y", [3]int{}, false, false},
	}
	for _, tt := range tests {
		got, ok := parseGitVersion(tt.in)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("parseGitVersion(%q) = %v, %v, want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		if ok && hardgit.VersionLess(got, MinGit) != tt.old {
			t.Errorf("VersionLess(%v, %v) = %v, want %v", got, MinGit, !tt.old, tt.old)
		}
	}
}

func TestCheckGitOnThisHost(t *testing.T) {
	v, err := CheckGit(context.Background())
	if err != nil {
		t.Fatalf("CheckGit = %q, %v (the host's git here is 2.39)", v, err)
	}
}

// TestNoACLFilesystemRefused: procfs and ramfs hold no ACLs; the check and
// Apply say so with the fix named (never silently weaker).
func TestNoACLFilesystemRefused(t *testing.T) {
	if err := CheckFilesystem("/proc/self"); !errors.Is(err, ErrNoACL) || !strings.Contains(err.Error(), "ext4") {
		t.Errorf("CheckFilesystem(/proc/self) = %v, want ErrNoACL naming filesystems that have them", err)
	}
	if err := CheckFilesystem(filepath.Join(t.TempDir(), "not", "made")); err != nil {
		t.Errorf("CheckFilesystem(TempDir) = %v, want nil (ext4 here)", err)
	}
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "ramfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("none", dir, "ramfs", 0, ""); err != nil {
		t.Fatalf("mount ramfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckFilesystem(dir); !errors.Is(err, ErrNoACL) {
		t.Errorf("CheckFilesystem(ramfs) = %v, want ErrNoACL", err)
	}
	if _, err := Apply(dir, testIDs); !errors.Is(err, ErrNoACL) {
		t.Errorf("Apply(ramfs) = %v, want ErrNoACL", err)
	}
	if err := ShareDir(dir, testIDs); !errors.Is(err, ErrNoACL) {
		t.Errorf("ShareDir(ramfs) = %v, want ErrNoACL", err)
	}
}
