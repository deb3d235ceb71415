package egress

import (
	"strings"
	"testing"
)

// TestLoopbackHint: issue 28. A grant on the host's loopback is
// unreachable the usual way from inside a container (its NO_PROXY sends
// loopback to the container's own); the hint says how.
func TestLoopbackHint(t *testing.T) {
	for in, want := range map[string]bool{
		"127.0.0.1:11434": true, "localhost:8080": true, "[::1]:11434": true, "127.0.0.2:80": true,
		"example.com": false, "10.0.0.5:80": false, "*.localhost.example:80": false,
	} {
		d, err := ParseDest(in)
		if err != nil {
			t.Fatalf("ParseDest(%q): %v", in, err)
		}
		h := LoopbackHint(d)
		if (h != "") != want {
			t.Errorf("LoopbackHint(%q) = %q, want a hint: %v", in, h, want)
		}
		if want && (!strings.Contains(h, "NO_PROXY="+NoProxyHosts) || !strings.Contains(h, `curl -x "$HTTP_PROXY"`)) {
			t.Errorf("LoopbackHint(%q) = %q: want NO_PROXY named and how to reach it", in, h)
		}
	}
}
