package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		args    []string
		want    []string // selected benchmarks
		wantErr string
	}{
		{nil, all, ""},
		{[]string{"-only", "create"}, []string{"create"}, ""},
		{[]string{"-only", " go, broker,go,"}, []string{"go", "broker"}, ""},
		{[]string{"-only", "broker,nope"}, nil, `unknown benchmark "nope"`},
		{[]string{"-only", ","}, nil, "no benchmark selected"},
		{[]string{"-iterations", "0"}, nil, "need at least 1"},
		{[]string{"extra"}, nil, "unexpected arguments"},
	}
	for _, tt := range tests {
		c, err := parse(append([]string{"ohd-bench"}, tt.args...), io.Discard)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parse(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("parse(%q) = %v", tt.args, err)
		default:
			if diff := cmp.Diff(tt.want, c.only); diff != "" {
				t.Errorf("parse(%q).only mismatch (-want +got):\n%s", tt.args, diff)
			}
		}
	}
}

func TestRunUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"ohd-bench", "-only", "nope"}, io.Discard, &stderr); code != 2 {
		t.Errorf("run(-only nope) = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), `unknown benchmark "nope"`) {
		t.Errorf("run(-only nope) said %q, want the unknown benchmark named", stderr.String())
	}
}

// TestRunBroker runs the quickest benchmark through the command and checks
// what a user sees: the details, the table, then one bench: line per
// result.
func TestRunBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it runs the benchmark for a moment")
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"ohd-bench", "-only", "broker", "-duration", "200ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run(-only broker) = %d, stderr:\n%s", code, stderr.String())
	}
	out := stdout.String()
	t.Log(out)
	table := strings.Index(out, "BENCHMARK ")
	if table < 0 {
		t.Fatalf("no table in the output:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^BENCHMARK\s+OHD\s+BASELINE\s+RATIO\s+TARGET\s+VERDICT$`).MatchString(out) {
		t.Errorf("table header missing or wrong:\n%s", out)
	}
	rows := regexp.MustCompile(`(?m)^broker-(keepalive|newconn|keepalive-1client|newconn-1client)\s+\d+ req/s\s+\d+ req/s\s+\d+\.\d\d\s+≥ 0\.80\s+(meets|misses)$`).FindAllString(out, -1)
	if len(rows) != 4 {
		t.Errorf("%d broker rate rows in the table, want 4:\n%s", len(rows), out)
	}
	p99 := regexp.MustCompile(`(?m)^broker-(keepalive|newconn|keepalive-1client|newconn-1client)-p99\s+\S+ p99\s+(\S+ p99|1ms bound)\s+\d+\.\d\d\s+≤ 1\.[05]0\s+(meets|misses)$`).FindAllString(out, -1)
	if len(p99) != 4 {
		t.Errorf("%d broker p99 rows in the table, want 4:\n%s", len(p99), out)
	}
	lines := regexp.MustCompile(`(?m)^bench: broker-\S+ ratio=\d+\.\d\d p99=\S+$`).FindAllStringIndex(out, -1)
	if len(lines) != 4 {
		t.Fatalf("%d bench: lines, want 4:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if l[0] < table {
			t.Errorf("a bench: line comes before the table:\n%s", out)
		}
	}
}
