package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// keySet holds the SHA-256 digests of the accepted session keys. Comparing
// digests makes every comparison the same length, so neither a key's
// content nor its length leaks through timing, and valid compares against
// every key with no early exit.
type keySet struct {
	digests [][sha256.Size]byte
}

func newKeySet(keys [][]byte) (keySet, error) {
	if len(keys) == 0 {
		return keySet{}, ErrNoKeys
	}
	var ks keySet
	for i, k := range keys {
		if len(bytes.TrimSpace(k)) == 0 {
			return keySet{}, fmt.Errorf("session API key %d is empty: %w", i, ErrNoKeys)
		}
		ks.digests = append(ks.digests, sha256.Sum256(k))
	}
	return ks, nil
}

// valid reports whether v is one of the keys, in time independent of
// which key matched, if any.
func (ks keySet) valid(v string) bool {
	if v == "" {
		return false
	}
	d := sha256.Sum256([]byte(v))
	ok := 0
	for i := range ks.digests {
		ok |= subtle.ConstantTimeCompare(d[:], ks.digests[i][:])
	}
	return ok == 1
}

// LoadOrCreateKeyFile returns the session API key kept in the file at path
// (the daemon's <state-dir>/session-api-key), creating the file with a new
// random key (43 characters of base64url, 256 bits) if it does not exist.
// created reports whether it did. An existing file must be a regular file
// owned by this user and not readable by group or others; its content,
// trimmed of white space, is the key. The key never appears in an error.
func LoadOrCreateKeyFile(path string) (key []byte, created bool, err error) {
	key, err = readKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("create session key file %s: %w", path, err)
	}
	key = []byte(base64.RawURLEncoding.EncodeToString(raw))
	if err := writeKeyFile(path, key); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Someone else created it first: use theirs.
			key, err = readKeyFile(path)
			return key, false, err
		}
		return nil, false, fmt.Errorf("create session key file %s: %w", path, err)
	}
	return key, true, nil
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("session key file %s is a symbolic link: replace it with a regular file (mode 0600)", path)
		}
		return nil, fmt.Errorf("read session key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read session key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("session key file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("session key file %s has mode %04o: other users can read it; run chmod 600 %s (and consider replacing the key)", path, perm, path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("session key file %s belongs to uid %d, not to ohd's uid %d: chown it or remove it to have a new key generated", path, sys.Uid, os.Geteuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, fmt.Errorf("read session key file %s: %w", path, err)
	}
	if len(b) > 4096 {
		return nil, fmt.Errorf("session key file %s is larger than 4 KiB: it should hold one key", path)
	}
	key := bytes.TrimSpace(b)
	if len(key) == 0 {
		return nil, fmt.Errorf("session key file %s is empty: write a key into it or remove it to have one generated", path)
	}
	return bytes.Clone(key), nil
}

// writeKeyFile creates path with key, mode 0600, atomically: the key is
// written to a temporary file which is then linked into place, so no
// reader ever sees a partial key and an existing file is never replaced.
func writeKeyFile(path string, key []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".session-api-key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(append(bytes.Clone(key), '\n'))
	if werr == nil {
		werr = tmp.Chmod(0o600)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
