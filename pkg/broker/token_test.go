package broker_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/broker"
)

func TestTokenFormat(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	got := broker.Token(key, "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b", 42)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("ohd-broker-v1|0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b|42"))
	want := "ohd1.0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b.42." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	if got != want {
		t.Errorf("Token() = %q, want %q", got, want)
	}
	id, epoch, mac, err := broker.ParseToken(got)
	if err != nil || id != "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b" || epoch != 42 || !hmac.Equal(mac, m.Sum(nil)) {
		t.Errorf("ParseToken(%q) = %q, %d, %x, %v", got, id, epoch, mac, err)
	}
}

func TestDeriveKey(t *testing.T) {
	k1 := broker.DeriveKey([]byte("master one"))
	k2 := broker.DeriveKey([]byte("master two"))
	if len(k1) != broker.KeySize || bytes.Equal(k1, k2) || !bytes.Equal(k1, broker.DeriveKey([]byte("master one"))) {
		t.Errorf("DeriveKey: len %d, distinct %v, stable %v", len(k1), !bytes.Equal(k1, k2), bytes.Equal(k1, broker.DeriveKey([]byte("master one"))))
	}
	// Pinned: changing the derivation would invalidate every token file.
	if got, want := base64.RawURLEncoding.EncodeToString(broker.DeriveKey(bytes.Repeat([]byte{1}, 32))), pinnedKey; got != want {
		t.Errorf("DeriveKey(0x01 * 32) = %s, want %s", got, want)
	}
}

// pinnedKey is HKDF-SHA256(ikm = 32 bytes of 0x01, salt = none,
// info = "ohd broker key v1", 32 bytes), base64url.
const pinnedKey = "sCTMPM1HPzajUvPJM--Gk69RzvFUwfiq1wrG3iI-dBQ"

func TestParseTokenRejects(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	good := broker.Token(key, "conv-a", 1)
	mac := good[strings.LastIndexByte(good, '.')+1:]
	cases := []string{
		"",
		"ohd1.",
		"ohd2.conv-a.1." + mac,
		"ohd1.conv-a.1." + mac + "=",
		"ohd1.conv-a.1." + mac[:42],
		"ohd1.conv-a.01." + mac,
		"ohd1.conv-a.-1." + mac,
		"ohd1.conv-a.+1." + mac,
		"ohd1.conv-a.18446744073709551616." + mac,
		"ohd1.conv/a.1." + mac,
		"ohd1..1." + mac,
		"ohd1.-conv.1." + mac,
		"ohd1.conv.a.1." + mac,
		"ohd1.conv-a." + mac,
		"ohd1.conv-a.1." + mac[:42] + "B", // non-canonical last character
		"ohd1.conv-a.1." + strings.Repeat("+", 43),
		"ohd1." + strings.Repeat("a", 129) + ".1." + mac,
		" " + good,
	}
	for _, s := range cases {
		if id, epoch, _, err := broker.ParseToken(s); !errors.Is(err, broker.ErrInvalidToken) {
			t.Errorf("ParseToken(%q) = %q, %d, %v; want ErrInvalidToken", s, id, epoch, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 32)
	f.Add(broker.Token(key, "conv-a", 1))
	f.Add(broker.Token(key, "0b9f6a1e-3c2d-4e5f-8a7b-6c5d4e3f2a1b", 18446744073709551615))
	f.Add("ohd1.conv-a.01.AAAA")
	f.Add("ohd1..1.")
	f.Fuzz(func(t *testing.T, s string) {
		id, epoch, mac, err := broker.ParseToken(s)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalidToken) {
				t.Fatalf("ParseToken(%q) error %v, want ErrInvalidToken", s, err)
			}
			return
		}
		if !broker.ValidID(id) || len(mac) != sha256.Size {
			t.Fatalf("ParseToken(%q) = %q, %d, %x: accepted a bad id or MAC", s, id, epoch, mac)
		}
		// A token that parses is canonical: re-encoding gives it back.
		re := "ohd1." + id + "." + uitoa(epoch) + "." + base64.RawURLEncoding.EncodeToString(mac)
		if re != s {
			t.Fatalf("ParseToken(%q) re-encodes as %q", s, re)
		}
	})
}

func uitoa(u uint64) string {
	if u == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for u > 0 {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
	}
	return string(b[i:])
}
