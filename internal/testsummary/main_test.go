package main

import (
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
