package proxy

import "testing"

func TestIsPortTail(t *testing.T) {
	for _, tt := range []struct {
		rest string
		want bool
	}{
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff/vscode", true},
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff/vscode/", true},
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff/desktop/vnc.html", true},
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff/events/search", false},
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff/vscodex", false},
		{"6f9619ff-8b86-d011-b42d-00c04fc964ff", false},
	} {
		if got := isPortTail(tt.rest); got != tt.want {
			t.Errorf("isPortTail(%q) = %v, want %v", tt.rest, got, tt.want)
		}
	}
}

// TestPortToken: a token names one conversation and one service, and
// depends on the session key.
func TestPortToken(t *testing.T) {
	a, err := newKeySet([][]byte{[]byte("key-a")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newKeySet([][]byte{[]byte("key-b")})
	sa, sb := &Server{keys: a}, &Server{keys: b}
	id, other := "6f9619ff-8b86-d011-b42d-00c04fc964ff", "7f9619ff-8b86-d011-b42d-00c04fc964ff"
	tok := sa.portToken(id, "vscode")
	if tok != sa.portToken(id, "vscode") {
		t.Fatal("portToken is not deterministic")
	}
	for what, other := range map[string]string{
		"another service":      sa.portToken(id, "desktop"),
		"another conversation": sa.portToken(other, "vscode"),
		"another key":          sb.portToken(id, "vscode"),
	} {
		if other == tok {
			t.Errorf("the token of %s equals the token", what)
		}
	}
	if tok == "key-a" || len(tok) != 43 {
		t.Errorf("portToken = %q, want 43 base64url characters of an HMAC", tok)
	}
}
