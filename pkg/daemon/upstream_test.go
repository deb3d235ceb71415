package daemon

import "testing"

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in     string
		remote bool
		ok     bool
	}{
		{"http://127.0.0.1:18000", false, true},
		{"http://localhost:18000/base", false, true},
		{"http://[::1]:18000", false, true},
		{"https://agent.example:443", false, false},
		{"https://agent.example:443", true, true},
		{"http://user:pw@127.0.0.1:1", false, false},
		{"http://127.0.0.1:1/?k=v", false, false},
		{"ftp://127.0.0.1", false, false},
		{"127.0.0.1:18000", false, false},
	} {
		_, err := ParseUpstream(tc.in, tc.remote)
		if (err == nil) != tc.ok {
			t.Errorf("ParseUpstream(%q, %v) = %v, want ok=%v", tc.in, tc.remote, err, tc.ok)
		}
	}
}
