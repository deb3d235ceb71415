package openhands

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"time"
)

// TokenPrefix is how the agent server recognises a Fernet token (ref §1:
// FERNET_TOKEN_PREFIX, cipher.py L19): version byte 0x80 and a timestamp
// below 2^36, base64url-encoded.
const TokenPrefix = "gAAAAA"

// ErrToken is returned by Decrypt for anything that is not a token made
// with this key: malformed, truncated, or failing its HMAC. The message
// never carries the token.
var ErrToken = errors.New("openhands: not a Fernet token of this key")

// Fernet is the agent server's cipher (ref §1), keyed by a key string
// such as OH_SECRET_KEY. It is safe for concurrent use.
type Fernet struct {
	signing, encryption []byte
	now                 func() time.Time
	rand                io.Reader
}

// NewFernet derives the cipher from key string s as the SDK does
// (cipher.py L73-79): digest = SHA-256(s); the HMAC-SHA256 key is
// digest[0:16], the AES-128 key digest[16:32].
func NewFernet(s string) *Fernet {
	d := sha256.Sum256([]byte(s))
	return &Fernet{signing: d[:16:16], encryption: d[16:32:32], now: time.Now, rand: rand.Reader}
}

// IsToken reports whether v looks like a Fernet token to the agent server
// (ref §1: values starting with the prefix are decrypted, others pass as
// plaintext).
func IsToken(v string) bool { return strings.HasPrefix(v, TokenPrefix) }

// Encrypt returns the token of plaintext: version 0x80, the current time,
// a random IV, AES-128-CBC of the PKCS#7-padded plaintext, HMAC-SHA256 of
// all that, url-safe base64 with padding (ref §1, token format).
func (f *Fernet) Encrypt(plaintext []byte) (string, error) {
	iv := make([]byte, aes.BlockSize)
	if _, err := io.ReadFull(f.rand, iv); err != nil {
		return "", err
	}
	return f.encrypt(plaintext, f.now(), iv), nil
}

func (f *Fernet) encrypt(plaintext []byte, ts time.Time, iv []byte) string {
	block, _ := aes.NewCipher(f.encryption) // 16 bytes: cannot fail
	pad := aes.BlockSize - len(plaintext)%aes.BlockSize
	body := append(append([]byte{}, plaintext...), bytes.Repeat([]byte{byte(pad)}, pad)...)
	msg := make([]byte, 0, 1+8+len(iv)+len(body)+sha256.Size)
	msg = append(msg, 0x80)
	msg = binary.BigEndian.AppendUint64(msg, uint64(ts.Unix()))
	msg = append(msg, iv...)
	ct := make([]byte, len(body))
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(ct, body)
	msg = append(msg, ct...)
	mac := hmac.New(sha256.New, f.signing)
	mac.Write(msg)
	msg = mac.Sum(msg)
	return base64.URLEncoding.EncodeToString(msg)
}

// Decrypt returns the plaintext of token. Like the SDK (cipher.py L52,
// no TTL) it ignores the timestamp. It accepts the token with or without
// base64 padding.
func (f *Fernet) Decrypt(token string) ([]byte, error) {
	raw, err := base64.URLEncoding.DecodeString(token)
	if err != nil {
		if raw, err = base64.RawURLEncoding.DecodeString(token); err != nil {
			return nil, ErrToken
		}
	}
	const head = 1 + 8 + aes.BlockSize
	if len(raw) < head+aes.BlockSize+sha256.Size || raw[0] != 0x80 || (len(raw)-head-sha256.Size)%aes.BlockSize != 0 {
		return nil, ErrToken
	}
	msg, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	mac := hmac.New(sha256.New, f.signing)
	mac.Write(msg)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, ErrToken
	}
	block, _ := aes.NewCipher(f.encryption)
	iv, ct := msg[9:head], msg[head:]
	pt := make([]byte, len(ct))
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(pt, ct)
	pad := int(pt[len(pt)-1])
	if pad < 1 || pad > aes.BlockSize || !bytes.Equal(pt[len(pt)-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
		return nil, ErrToken
	}
	return pt[:len(pt)-pad], nil
}
