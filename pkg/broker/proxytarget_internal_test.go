package broker

import "testing"

func TestProxyTargetStaysUnderTheBaseURL(t *testing.T) {
	for _, tc := range []struct {
		rest, want string
		ok         bool
	}{
		{"chat/completions", "https://api.example/v1/chat/completions", true},
		{"models/gpt%3A4", "https://api.example/v1/models/gpt%3A4", true},
		{"../admin", "", false},
		{"a/%2e%2e/admin", "", false},
		{"..%2F..%2Fadmin", "", false},
		{"a%2fb", "", false},
		{"a%5C..%5Cadmin", "", false},
		{"%zz", "", false},
	} {
		got, err := proxyTarget("https://api.example/v1", tc.rest, "")
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("proxyTarget(%q) = %q, %v; want %q, ok %v", tc.rest, got, err, tc.want, tc.ok)
		}
	}
}
