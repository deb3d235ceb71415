package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGoBench(t *testing.T) {
	const (
		broker  = "github.com/ohd-dev/ohd/pkg/broker"
		runtime = "github.com/ohd-dev/ohd/pkg/runtime"
	)
	tests := []struct {
		file string
		want []GoBenchmark
	}{
		{"gobench-v.txt", []GoBenchmark{
			{Package: broker, Name: "BenchmarkWhoami-2", Iterations: 20000,
				Metrics: []Metric{{55012, "ns/op"}, {5120, "B/op"}, {61, "allocs/op"}}},
			{Package: broker, Name: "BenchmarkGitCredential/get-2", Iterations: 10000, Metrics: []Metric{{101234, "ns/op"}}},
			{Package: runtime, Name: "BenchmarkStartRemove", Status: "skip",
				Reason: "docker_test.go:40: skipped: Docker Engine not reachable; start Docker"},
			{Package: runtime, Name: "BenchmarkStartRemove2-2", Iterations: 3,
				Metrics: []Metric{{812345678, "ns/op"}, {120, "create-ms/op"}, {40.5, "ready-ms/op"}}},
			{Package: runtime, Name: "BenchmarkBroken-2", Status: "fail", Reason: "x_test.go:10: boom"},
			{Package: "github.com/ohd-dev/ohd/pkg/metrics", Status: "fail",
				Reason: "[build failed] pkg/metrics/metrics_test.go:12:2: undefined: nope"},
			{Package: "github.com/ohd-dev/ohd/pkg/panics", Status: "fail",
				Reason: "panic: runtime error: index out of range [recovered]"},
		}},
		// Without -v: a failure before the first result comes before the
		// "pkg:" line, a failure in the timed runs follows the name, and
		// reasons follow their status.
		{"gobench-plain.txt", []GoBenchmark{
			{Package: "gbt", Name: "BenchmarkFail", Status: "fail", Reason: "x_test.go:4: boom"},
			{Package: "gbt", Name: "BenchmarkFailLater-2", Status: "fail", Reason: "x_test.go:5: late boom"},
			{Package: "gbt", Name: "BenchmarkLog-2", Iterations: 10, Metrics: []Metric{{39, "ns/op"}, {12, "x-ms/op"}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseGoBench(f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseGoBench(%s) mismatch (-want +got):\n%s", tt.file, diff)
			}
		})
	}
}

func TestParseGoBenchLines(t *testing.T) {
	tests := []struct {
		in   string
		want []GoBenchmark
	}{
		{"", nil},
		{"BenchmarkX-2 \t 5\t 1.5 ns/op", []GoBenchmark{{Name: "BenchmarkX-2", Iterations: 5, Metrics: []Metric{{1.5, "ns/op"}}}}},
		{"BenchmarkX-2 \t 5\t 1.5", nil},                        // a value without a unit
		{"BenchmarkX-2 \t 5\t ns/op 1.5", nil},                  // unit before value
		{"BenchmarkX-2 \t 99999999999999999999\t 1 ns/op", nil}, // iterations overflow
		{"BenchmarkX-2", nil},
		{"--- SKIP: BenchmarkY\n", []GoBenchmark{{Name: "BenchmarkY", Status: "skip"}}},
		{"ok  \tpkg\t0.1s", nil},
		{"FAIL\tpkg\t0.1s", []GoBenchmark{{Package: "pkg", Status: "fail"}}},
	}
	for _, tt := range tests {
		got, err := ParseGoBench(strings.NewReader(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseGoBench(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func FuzzParseGoBench(f *testing.F) {
	for _, name := range []string{"gobench-v.txt", "gobench-plain.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseGoBench(strings.NewReader(in))
		if err != nil {
			return // a line over 1 MiB
		}
		for _, b := range got {
			if b.Status == "" && (b.Name == "" || len(b.Metrics) == 0 || b.Iterations < 0) {
				t.Errorf("ParseGoBench(%q): result %+v without name, metrics or with negative iterations", in, b)
			}
			if b.Status != "" && !slices.Contains([]string{"skip", "fail"}, b.Status) {
				t.Errorf("ParseGoBench(%q): status %q", in, b.Status)
			}
		}
	})
}

func TestBenchPackages(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"pkg/a/a_test.go":          "package a\n\nfunc BenchmarkA(b *testing.B) {}\n",
		"pkg/a/b_test.go":          "package a\n\nfunc BenchmarkB(b *testing.B) {}\n",
		"pkg/b/b_test.go":          "package b\n\nfunc TestB(t *testing.T) {}\n",
		"pkg/c/d/d_test.go":        "package d\n\nfunc BenchmarkD(b *testing.B) {}\n",
		"pkg/c/testdata/x_test.go": "package x\n\nfunc BenchmarkX(b *testing.B) {}\n",
		"pkg/e/e.go":               "package e\n\nfunc BenchmarkE() {}\n",
	}
	for p, body := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := benchPackages(filepath.Join(root, "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"./pkg/a", "./pkg/c/d"}, got); diff != "" {
		t.Errorf("benchPackages() mismatch (-want +got):\n%s", diff)
	}
}
