package masterkey

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadCreatesKeyOnce(t *testing.T) {
	dir := t.TempDir()
	k1, err := Load(dir, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Created {
		t.Error("first Load did not report creating the key")
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %v, want 0600", st.Mode().Perm())
	}
	k2, err := Load(dir, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if k2.Created || !bytes.Equal(k1.raw, k2.raw) {
		t.Error("second Load did not read back the same key")
	}
}

func TestLoadPrefersSystemdCredential(t *testing.T) {
	state, creds := t.TempDir(), t.TempDir()
	raw := bytes.Repeat([]byte{9}, Size)
	if err := os.WriteFile(filepath.Join(creds, CredentialName), []byte(hex.EncodeToString(raw)+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	k, err := Load(state, env(map[string]string{"CREDENTIALS_DIRECTORY": creds}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.raw, raw) || k.Source != filepath.Join(creds, CredentialName) {
		t.Errorf("Load used %s, want the credential", k.Source)
	}
	if _, err := os.Stat(filepath.Join(state, FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Error("Load wrote a key file although a credential was given")
	}
}

func TestLoadMalformed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("not-a-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, env(nil))
	if err == nil || !strings.Contains(err.Error(), "64 hex characters") {
		t.Fatalf("Load(malformed) = %v, want an error explaining the format", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FileName)); string(b) != "not-a-key" {
		t.Error("Load overwrote a malformed key file")
	}
}

func TestSealOpen(t *testing.T) {
	k, _ := New(bytes.Repeat([]byte{1}, Size))
	other, _ := New(bytes.Repeat([]byte{2}, Size))
	sealed := k.Seal("secrets|a", []byte("value"))
	if bytes.Contains(sealed, []byte("value")) {
		t.Error("sealed value contains the plaintext")
	}
	if pt, err := k.Open("secrets|a", sealed); err != nil || string(pt) != "value" {
		t.Errorf("Open = %q, %v", pt, err)
	}
	for name, f := range map[string]func() ([]byte, error){
		"other ad":  func() ([]byte, error) { return k.Open("secrets|b", sealed) },
		"other key": func() ([]byte, error) { return other.Open("secrets|a", sealed) },
		"truncated": func() ([]byte, error) { return k.Open("secrets|a", sealed[:5]) },
		"flipped": func() ([]byte, error) {
			c := bytes.Clone(sealed)
			c[len(c)-1] ^= 1
			return k.Open("secrets|a", c)
		},
	} {
		if _, err := f(); !errors.Is(err, ErrDecrypt) {
			t.Errorf("Open with %s = %v, want ErrDecrypt", name, err)
		}
	}
	if bytes.Equal(k.Derive("a"), k.Derive("b")) || !bytes.Equal(k.Derive("a"), k.Derive("a")) || len(k.Derive("a")) != 32 {
		t.Error("Derive is not a deterministic 32-byte per-label key")
	}
}
