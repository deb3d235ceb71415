package hardgit

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfigList(t *testing.T) {
	in := "filter.lfs.clean\ngit-lfs clean -- %f\x00filter.lfs.required\x00filter.a.b=c.smudge\nx\x00filter.clean\nno-subsection\x00FILTER.Up.process\n\x00other.x.clean\ny\x00"
	got, err := parseConfigList([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []configEntry{
		{Key: "filter.lfs.clean", Value: "git-lfs clean -- %f", HasValue: true},
		{Key: "filter.lfs.required"},
		{Key: "filter.a.b=c.smudge", Value: "x", HasValue: true},
		{Key: "filter.clean", Value: "no-subsection", HasValue: true},
		{Key: "FILTER.Up.process", Value: "", HasValue: true},
		{Key: "other.x.clean", Value: "y", HasValue: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseConfigList mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Up", "a.b=c", "lfs"}, filterDrivers(got)); diff != "" {
		t.Errorf("filterDrivers mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"no terminator", "\x00", "\nvalue\x00"} {
		if _, err := parseConfigList([]byte(bad)); err == nil {
			t.Errorf("parseConfigList(%q) = nil error, want one", bad)
		}
	}
}

func FuzzParseConfigList(f *testing.F) {
	f.Add([]byte("filter.lfs.clean\ngit-lfs clean -- %f\x00filter.lfs.required\x00"))
	f.Add([]byte("filter.a.b=c.smudge\nx\x00filter.clean\ny\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := parseConfigList(b)
		if err != nil {
			return
		}
		var re bytes.Buffer
		for _, e := range entries {
			re.WriteString(e.Key)
			if e.HasValue {
				re.WriteString("\n" + e.Value)
			}
			re.WriteByte(0)
		}
		if !bytes.Equal(re.Bytes(), b) {
			t.Fatalf("round trip of %q gave %q", b, re.Bytes())
		}
		for _, d := range filterDrivers(entries) {
			if d == "" {
				t.Fatalf("empty driver name from %q", b)
			}
			// The override keys must parse back to the same driver.
			for _, kv := range disableFilters([]string{d}) {
				if got := filterDrivers([]configEntry{{Key: kv[0]}}); len(got) != 1 || got[0] != d {
					t.Fatalf("override key %q names drivers %q, want %q", kv[0], got, d)
				}
			}
		}
	})
}
