package broker

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRedactorChunks streams texts holding the key (whole, overlapping,
// at the edges, partial) through the redactor in every split into two
// chunks and in random splits, and checks the output equals masking the
// whole text at once.
func TestRedactorChunks(t *testing.T) {
	key := []byte("sk-abcab")
	texts := []string{
		"",
		"sk-abcab",
		"xx sk-abcab yy",
		"sk-abcabsk-abcab",
		"sk-abcsk-abcab",
		"sk-ab",
		"tail sk-abca",
		"sk-abcabcab sk-",
		strings.Repeat("s", 50) + "sk-abcab" + strings.Repeat("k-", 10),
	}
	run := func(text string, splits []int) string {
		r := newRedactor(key)
		var out bytes.Buffer
		src := []byte(text)
		prev := 0
		for _, s := range append(splits, len(src)) {
			chunk := src[prev:s]
			prev = s
			for len(chunk) > 0 {
				n := copy(r.space(), chunk)
				chunk = chunk[n:]
				out.Write(r.advance(n))
			}
		}
		out.Write(r.flush())
		return out.String()
	}
	for _, text := range texts {
		want := []byte(text)
		maskAll(want, key)
		for i := 0; i <= len(text); i++ {
			if got := run(text, []int{i}); got != string(want) {
				t.Errorf("redact(%q split at %d) = %q, want %q", text, i, got, want)
			}
		}
		if bytes.Contains(want, key) {
			t.Errorf("maskAll(%q) left the key: %q", text, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "sk-abc "
	for range 2000 {
		b := make([]byte, rng.IntN(60))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		text := string(b)
		var splits []int
		for p := 0; p < len(text); p += 1 + rng.IntN(5) {
			splits = append(splits, p)
		}
		got := run(text, splits)
		want := []byte(text)
		maskAll(want, key)
		if got != string(want) || strings.Contains(got, string(key)) || len(got) != len(text) {
			t.Fatalf("redact(%q in chunks at %v) = %q, want %q", text, splits, got, want)
		}
	}
}

func TestRedactString(t *testing.T) {
	key := []byte("k3y")
	cases := map[string]string{"": "", "k3y": "***", "a k3y b k3y": "a *** b ***", "k3": "k3"}
	for in, want := range cases {
		if got := redactString(in, key); got != want {
			t.Errorf("redactString(%q) = %q, want %q", in, got, want)
		}
	}
	if got := redactString("k3y", nil); got != "k3y" {
		t.Errorf("redactString with no key = %q", got)
	}
}

// TestRedactorKeys: with several keys, each is masked wherever the
// stream is split.
func TestRedactorKeys(t *testing.T) {
	keys := [][]byte{[]byte("lin_tok3n"), []byte("acme-0rg"), nil}
	text := "a lin_tok3n b acme-0rg lin_tok3nacme-0rg c lin_ acme-"
	want := []byte(text)
	for _, k := range keys[:2] {
		maskAll(want, k)
	}
	for i := 0; i <= len(text); i++ {
		for j := i; j <= len(text); j += 7 {
			r := newRedactor(keys...)
			var out bytes.Buffer
			for _, chunk := range []string{text[:i], text[i:j], text[j:]} {
				for len(chunk) > 0 {
					n := copy(r.space(), chunk)
					chunk = chunk[n:]
					out.Write(r.advance(n))
				}
			}
			out.Write(r.flush())
			if out.String() != string(want) {
				t.Fatalf("redact split at %d,%d = %q, want %q", i, j, out.String(), want)
			}
		}
	}
}
