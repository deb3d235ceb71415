package nofollow

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(file, 7); err != nil || string(b) != "content" {
		t.Errorf("ReadFile(%q, 7) = %q, %v; want \"content\", nil", file, b, err)
	}
	if _, err := ReadFile(file, 6); err == nil {
		t.Errorf("ReadFile(%q, 6) = nil error, want one: the file is larger", file)
	}
	if _, err := ReadFile(link, 1<<10); err == nil {
		t.Errorf("ReadFile(%q) followed a symlink", link)
	}
	if _, err := ReadFile(fifo, 1<<10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(%q) = %v, want fs.ErrNotExist (not a regular file)", fifo, err)
	}
}

// TestReadBeneathNeverLeavesTheDirectory plants a symlink on the way and
// as the last component: neither is followed.
func TestReadBeneathNeverLeavesTheDirectory(t *testing.T) {
	outside, dir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "refs", "heads"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "refs", "heads", "x"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "c"), []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "refs"), filepath.Join(dir, "refs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "refs", "heads", "x"), filepath.Join(dir, "a", "b", "last")); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadBeneath(dir, "a/b/c", 1<<10); err != nil || string(b) != "in" {
		t.Errorf("ReadBeneath(dir, a/b/c) = %q, %v; want \"in\", nil", b, err)
	}
	for _, rel := range []string{"refs/heads/x", "a/b/last", "a/../refs/heads/x", "/etc/passwd", "a//b/c"} {
		if b, err := ReadBeneath(dir, rel, 1<<10); err == nil {
			t.Errorf("ReadBeneath(dir, %q) = %q, want an error", rel, b)
		}
	}
	if _, err := ReadBeneath(dir, "refs/heads/x", 1<<10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadBeneath(dir, refs/heads/x) = %v, want fs.ErrNotExist", err)
	}
}
