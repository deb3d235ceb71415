package conversation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHelperCopies: a copy by content hash in ohd's directory, the same
// copy while the binary is unchanged, a new one when it changes (make
// install), and the newest copy once the binary is gone (make clean).
func TestHelperCopies(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ohctl")
	if err := os.WriteFile(src, []byte("version one"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &helperCopies{src: src, dir: filepath.Join(dir, "state", "bin")}
	p1, warn, err := h.current()
	if err != nil || warn != "" || filepath.Dir(p1) != h.dir || !strings.HasPrefix(filepath.Base(p1), "ohctl-") {
		t.Fatalf("current() = %q, %q, %v", p1, warn, err)
	}
	if b, _ := os.ReadFile(p1); string(b) != "version one" {
		t.Errorf("copy holds %q", b)
	}
	if st, _ := os.Stat(p1); st.Mode().Perm() != 0o555 {
		t.Errorf("copy mode %v, want 0555", st.Mode().Perm())
	}
	if again, _, _ := h.current(); again != p1 {
		t.Errorf("unchanged binary: %q, want the same copy %q", again, p1)
	}
	// make install: a new binary at the same path.
	if err := os.WriteFile(src+".new", []byte("version two"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(src+".new", src); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(src, later, later)
	p2, _, err := h.current()
	if err != nil || p2 == p1 {
		t.Fatalf("after the binary changed: %q, %v; want a new copy", p2, err)
	}
	if b, _ := os.ReadFile(p2); string(b) != "version two" {
		t.Errorf("new copy holds %q", b)
	}
	if _, err := os.Stat(p1); err != nil {
		t.Errorf("the old copy is gone (a container may still mount it): %v", err)
	}
	// make clean.
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	p3, warn, err := h.current()
	if err != nil || p3 != p2 || !strings.Contains(warn, "newest copy") {
		t.Errorf("binary gone: %q, %q, %v; want the newest copy %q with a warning", p3, warn, err, p2)
	}
	// Nothing at all: an error that says what to do.
	h2 := &helperCopies{src: src, dir: filepath.Join(dir, "empty")}
	if _, _, err := h2.current(); err == nil || !strings.Contains(err.Error(), "--ohctl-binary") {
		t.Errorf("no binary, no copy: %v", err)
	}
}
