package proxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "session-api-key")
	key, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created || len(key) != 43 {
		t.Fatalf("LoadOrCreateKeyFile(new) = %q, %v, %v; want a 43-character key, created", key, created, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", st.Mode(), err)
	}
	again, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || !bytes.Equal(again, key) {
		t.Errorf("LoadOrCreateKeyFile(existing) = %q, %v, %v; want the same key, not created", again, created, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the key file (no temporary left)", len(entries))
	}

	// An operator-written key, with a trailing newline.
	own := filepath.Join(dir, "own")
	if err := os.WriteFile(own, []byte("  my-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, created, err := LoadOrCreateKeyFile(own); err != nil || created || string(k) != "my-key" {
		t.Errorf("LoadOrCreateKeyFile(own) = %q, %v, %v; want my-key", k, created, err)
	}
}

func TestLoadOrCreateKeyFileRefuses(t *testing.T) {
	dir := t.TempDir()
	const secret = "secret-key-value"
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("target", secret, 0o600), link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"readable by others", write("open", secret, 0o644), "chmod 600"},
		{"readable by group", write("group", secret, 0o640), "chmod 600"},
		{"empty", write("empty", "\n", 0o600), "is empty"},
		{"symlink", link, "symbolic link"},
		{"directory", dir, "not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, _, err := LoadOrCreateKeyFile(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadOrCreateKeyFile(%s) = %q, %v; want an error saying %q", tc.name, k, err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q reveals the key", err)
			}
		})
	}
}

func TestNewNeedsKeys(t *testing.T) {
	for _, keys := range [][][]byte{nil, {}, {[]byte("")}} {
		_, err := New(Options{Conversations: newFake(t), Keys: keys})
		if !errors.Is(err, ErrNoKeys) {
			t.Errorf("New(keys %q) = %v, want ErrNoKeys", keys, err)
		}
	}
	if _, err := New(Options{Keys: [][]byte{[]byte("k")}}); err == nil {
		t.Errorf("New without Conversations = nil error")
	}
}

func TestServeRefusesNonLoopback(t *testing.T) {
	for _, allow := range []bool{false, true} {
		s, err := New(Options{Conversations: newFake(t), Keys: [][]byte{[]byte("k")}, AllowRemote: allow})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if allow {
			cancel() // serve, then stop at once
		}
		err = s.Serve(ctx, ln)
		cancel()
		if allow && err != nil {
			t.Errorf("Serve(0.0.0.0, AllowRemote) = %v, want nil", err)
		}
		if !allow && !errors.Is(err, ErrNonLoopback) {
			t.Errorf("Serve(0.0.0.0) = %v, want ErrNonLoopback", err)
		}
	}
}
