package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"pass","Package":"p/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"p/a","Test":"TestDocker"}`,
		`{"Action":"output","Package":"p/a","Test":"TestDocker","Output":"    x_test.go:12: skipped: no Docker engine answers\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestDocker","Output":"--- SKIP: TestDocker (0.00s)\n"}`,
		`{"Action":"skip","Package":"p/a","Test":"TestDocker"}`,
		`{"Action":"pass","Package":"p/a","Elapsed":1.25}`,
		`{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:3: got 1, want 2\n"}`,
		`{"Action":"fail","Package":"p/b","Test":"TestBad","Elapsed":0.2}`,
		`{"Action":"fail","Package":"p/b","Elapsed":0.3}`,
		`# p/c`,
	}, "\n")
	var out strings.Builder
	code := run(strings.NewReader(in), &out)
	got := out.String()
	for _, want := range []string{
		"ok   p/a 1.2s\n",
		"--- FAIL: p/b TestBad (0.2s)\n    b_test.go:3: got 1, want 2\n",
		"FAIL p/b 0.3s\n",
		"# p/c\n",
		"skipped (1), each with its reason:\n  p/a TestDocker: skipped: no Docker engine answers\n",
		"\ntests: 1 passed, 1 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if code != 1 {
		t.Errorf("exit code %d, want 1 (a test failed)", code)
	}
}

// TestSummaryUnfinishedPackage feeds recorded `go test -json` streams of a
// package that hit -timeout (testdata/timeout.jsonl: go test -timeout 2s,
// TestSlow/Sub sleeping 10 s) and of one whose goroutine panicked
// (testdata/panic.jsonl): go test reports no outcome for the tests that
// were running, only the package's fail. The summary names them, shows the
// panic, and counts each as failed.
func TestSummaryUnfinishedPackage(t *testing.T) {
	for _, tc := range []struct {
		file  string
		wants []string
		fails string
	}{
		{"timeout.jsonl", []string{
			"--- FAIL: example.com/ts/p: panic: test timed out after 2s; tests that never finished: TestSlow, TestSlow/Sub\n",
			"\t\tTestSlow/Sub (2s)\n",
		}, "tests: 1 passed, 2 failed, 0 skipped\n"},
		{"panic.jsonl", []string{
			"--- FAIL: example.com/ts/p: panic: boom in goroutine; tests that never finished: TestSlow\n",
			"p_test.go:12",
		}, "tests: 1 passed, 1 failed, 0 skipped\n"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			code := run(bytes.NewReader(in), &out)
			got := out.String()
			for _, want := range append(tc.wants, tc.fails, "FAIL example.com/ts/p") {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if n := strings.Count(got, "\n"); n > maxUnfinishedLines+30 {
				t.Errorf("output has %d lines: the goroutine dump is not bounded", n)
			}
		})
	}
}
