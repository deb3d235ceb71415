// Package masterkey loads ohd's master key and seals values with it.
//
// The master key is 32 random bytes. It comes from, in order:
//
//  1. $CREDENTIALS_DIRECTORY/ohd-master-key, when systemd passes it with
//     LoadCredential= (the key then never sits in the state directory);
//  2. <state-dir>/master.key, created 0600 with fresh random bytes on first
//     start.
//
// The file holds the key as 64 hexadecimal characters (a trailing newline is
// allowed) or as 32 raw bytes.
//
// Seal encrypts with AES-256-GCM. The additional data names where a value
// lives ("<bucket>|<name>"), so a sealed value copied to another record does
// not open there. Keys for other purposes (the broker's HMAC key) are
// derived with Derive and a fixed label, so the master key itself is used for
// one thing only.
package masterkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Size is the length of a master key in bytes.
const Size = 32

// CredentialName is the name of the systemd credential holding the key.
const CredentialName = "ohd-master-key"

// FileName is the key file's name inside the state directory.
const FileName = "master.key"

// sealVersion prefixes every sealed value, so the format can change later.
const sealVersion byte = 1

// ErrDecrypt is returned by Open when a sealed value does not open with this
// key and additional data: the wrong master key, or a value moved or damaged.
var ErrDecrypt = errors.New("sealed value does not open with this master key")

// Key is a loaded master key. It is safe for concurrent use.
type Key struct {
	raw  []byte
	aead cipher.AEAD
	// Source is the file the key was read from.
	Source string
	// Created is true when Load created the key file just now.
	Created bool
}

// New returns a Key for raw, which must be Size bytes.
func New(raw []byte) (*Key, error) {
	if len(raw) != Size {
		return nil, fmt.Errorf("master key: want %d bytes, got %d", Size, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	return &Key{raw: append([]byte(nil), raw...), aead: aead}, nil
}

// Load reads the master key from the systemd credentials directory (when
// getenv("CREDENTIALS_DIRECTORY") names one holding ohd-master-key), else
// from <stateDir>/master.key, creating that file (0600) on first start.
func Load(stateDir string, getenv func(string) string) (*Key, error) {
	if dir := getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		path := filepath.Join(dir, CredentialName)
		if _, err := os.Stat(path); err == nil {
			return loadFile(path)
		}
	}
	path := filepath.Join(stateDir, FileName)
	k, err := loadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	return create(path)
}

func loadFile(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read master key %s: %w", path, err)
	}
	raw, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("read master key %s: %w: the file must hold 64 hex characters or %d raw bytes", path, err, Size)
	}
	k, err := New(raw)
	if err != nil {
		return nil, err
	}
	k.Source = path
	return k, nil
}

func decode(b []byte) ([]byte, error) {
	if len(b) == Size {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != Size {
		return nil, errors.New("malformed key")
	}
	return raw, nil
}

func create(path string) (*Key, error) {
	raw := make([]byte, Size)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("create master key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create master key %s: %w", path, err)
	}
	// O_EXCL: two daemons racing on first start must not both write a key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadFile(path)
		}
		return nil, fmt.Errorf("create master key %s: %w", path, err)
	}
	_, werr := f.WriteString(hex.EncodeToString(raw) + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("create master key %s: %w", path, werr)
	}
	k, err := New(raw)
	if err != nil {
		return nil, err
	}
	k.Source, k.Created = path, true
	return k, nil
}

// Seal encrypts plaintext bound to ad (e.g. "secrets|<name>").
func (k *Key) Seal(ad string, plaintext []byte) []byte {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("masterkey: crypto/rand failed: " + err.Error())
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+k.aead.Overhead())
	out = append(out, sealVersion)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, []byte(ad))
}

// Open decrypts a value sealed with Seal under the same ad. It returns
// ErrDecrypt when the key or ad differ or the value was changed.
func (k *Key) Open(ad string, sealed []byte) ([]byte, error) {
	ns := k.aead.NonceSize()
	if len(sealed) < 1+ns+k.aead.Overhead() || sealed[0] != sealVersion {
		return nil, ErrDecrypt
	}
	pt, err := k.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], []byte(ad))
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// Derive returns a 32-byte key for one purpose, HMAC-SHA256(master, label).
// Labels are fixed strings such as "ohd-broker-key-v1".
func (k *Key) Derive(label string) []byte {
	m := hmac.New(sha256.New, k.raw)
	m.Write([]byte(label))
	return m.Sum(nil)
}
