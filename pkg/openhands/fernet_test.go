package openhands

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// The worked example of ref §1, computed three ways by the reference.
const (
	exampleKey   = "ohd-example-secret-key-0123456789"
	exampleToken = "gAAAAABpVbkAAAECAwQFBgcICQoLDA0OD6zjGmLFAo7DXoBd17sndK33t3wUpYhsgo4qbedGIYyFxnbwTBxmlRLtWymkeBwcZg=="
)

func TestFernetWorkedExample(t *testing.T) {
	f := NewFernet(exampleKey)
	if got, want := hex.EncodeToString(f.signing), "6893b4b79315039fbac8ecd894407da1"; got != want {
		t.Errorf("signing key = %s, want %s", got, want)
	}
	if got, want := hex.EncodeToString(f.encryption), "8fbb4f8ff384d86144891bd11c417707"; got != want {
		t.Errorf("encryption key = %s, want %s", got, want)
	}
	iv := make([]byte, 16)
	for i := range iv {
		iv[i] = byte(i)
	}
	if got := f.encrypt([]byte("sk-test-123"), time.Unix(1767225600, 0), iv); got != exampleToken {
		t.Errorf("encrypt = %s, want %s", got, exampleToken)
	}
	pt, err := f.Decrypt(exampleToken)
	if err != nil || string(pt) != "sk-test-123" {
		t.Errorf("Decrypt(example) = %q, %v, want sk-test-123", pt, err)
	}
	if !IsToken(exampleToken) || IsToken("sk-test-123") {
		t.Error("IsToken does not tell the example token from its plaintext")
	}
}

func TestFernetRefusesOtherKeysAndDamage(t *testing.T) {
	other := NewFernet("another key")
	if _, err := other.Decrypt(exampleToken); !errors.Is(err, ErrToken) {
		t.Errorf("Decrypt under another key = %v, want ErrToken", err)
	}
	f := NewFernet(exampleKey)
	for _, tok := range []string{"", "gAAAAA", exampleToken[:len(exampleToken)-8], "!!!!" + exampleToken[4:], exampleToken[:20] + "A" + exampleToken[21:]} {
		if _, err := f.Decrypt(tok); !errors.Is(err, ErrToken) {
			t.Errorf("Decrypt(%q) = %v, want ErrToken", tok, err)
		}
	}
}

func TestFernetRoundTrip(t *testing.T) {
	f := NewFernet("k")
	for _, pt := range [][]byte{{}, []byte("x"), bytes.Repeat([]byte("a"), 16), bytes.Repeat([]byte("b"), 1000)} {
		tok, err := f.Encrypt(pt)
		if err != nil {
			t.Fatal(err)
		}
		if !IsToken(tok) {
			t.Errorf("Encrypt gave %q, which lacks the prefix", tok[:10])
		}
		got, err := f.Decrypt(tok)
		if err != nil || !bytes.Equal(got, pt) {
			t.Errorf("round trip of %d bytes = %d bytes, %v", len(pt), len(got), err)
		}
	}
}

func FuzzFernetDecrypt(f *testing.F) {
	f.Add(exampleToken)
	f.Add("gAAAAA")
	c := NewFernet(exampleKey)
	f.Fuzz(func(t *testing.T, tok string) {
		pt, err := c.Decrypt(tok)
		if err == nil {
			// Whatever decrypts must be a token of this key: re-encrypting
			// gives a token that decrypts to the same bytes.
			again, err := c.Encrypt(pt)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := c.Decrypt(again); err != nil || !bytes.Equal(back, pt) {
				t.Fatalf("round trip failed: %v", err)
			}
		}
	})
}
