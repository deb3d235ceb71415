package sdnotify

import (
	"strings"
	"testing"
)

func FuzzParseListenEnv(f *testing.F) {
	f.Add("42", "2", "control:api")
	f.Add("42", "1", "")
	f.Add("7", "1", "x")
	f.Fuzz(func(t *testing.T, pid, fds, names string) {
		got, err := parseListenEnv(pid, fds, names, 42)
		if err != nil {
			if got != nil {
				t.Fatalf("parseListenEnv(%q, %q, %q) = %q with error %v", pid, fds, names, got, err)
			}
			return
		}
		if len(got) > maxListenFDs {
			t.Fatalf("parseListenEnv(%q, %q, %q) = %d names, above the bound", pid, fds, names, len(got))
		}
		for _, n := range got {
			if strings.Contains(n, ":") {
				t.Fatalf("parseListenEnv(%q, %q, %q) returned name %q holding the separator", pid, fds, names, n)
			}
		}
	})
}

func FuzzStatus(f *testing.F) {
	f.Add("reconciling\nREADY=1")
	f.Fuzz(func(t *testing.T, msg string) {
		if got := oneLine(msg); strings.ContainsAny(got, "\n\r\x00") {
			t.Fatalf("oneLine(%q) = %q still breaks the line", msg, got)
		}
	})
}
