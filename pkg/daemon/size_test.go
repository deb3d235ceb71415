package daemon

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"4294967296", 4 << 30, ""},
		{"4g", 4 << 30, ""},
		{"4G", 4 << 30, ""},
		{"4GiB", 4 << 30, ""},
		{"4gb", 4 << 30, ""},
		{"512m", 512 << 20, ""},
		{"1.5g", 3 << 29, ""},
		{"64k", 64 << 10, ""},
		{"100b", 100, ""},
		{" 2t ", 2 << 40, ""},
		{"", 0, "want a number"},
		{"g", 0, "want a number"},
		{"4x", 0, "want a number"},
		{"-4g", 0, "not a positive number"},
		{"0", 0, "not a positive number"},
		{"1.5", 0, "whole number"},
		{"1..5g", 0, "not a positive number"},
		{"99999999999t", 0, "too large"},
	} {
		got, err := ParseSize(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseSize(%q) = %d, %v, want an error with %q", tc.in, got, err, tc.err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4g", "512m", "1.5GiB", "0", "", "-1", "1e3k", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n <= 0 {
			t.Fatalf("ParseSize(%q) = %d without an error", s, n)
		}
	})
}

func TestFormatSizeRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{{4 << 30, "4g"}, {512 << 20, "512m"}, {3 << 29, "1536m"}, {64 << 10, "64k"}, {100, "100"}, {2 << 40, "2t"}} {
		got := FormatSize(tc.in)
		back, err := ParseSize(got)
		if got != tc.want || err != nil || back != tc.in {
			t.Errorf("FormatSize(%d) = %q (parsed back %d, %v), want %q", tc.in, got, back, err, tc.want)
		}
	}
}
