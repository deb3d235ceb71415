// Command testsummary reads `go test -json` on standard input and writes
// what `make test` shows: a line per package as it finishes (so a long
// run shows progress), the output of every failed test, and at the end
// the list of skipped tests with their reasons (a test skips when this
// machine lacks what it needs; see internal/testenv). It exits 1 if any
// test or package failed, and passes non-JSON lines (build errors)
// through. A package that ended without its running tests finishing (it
// hit -timeout, or a goroutine panicked: go test then reports no outcome
// for them) is shown with its panic line and the names of the tests that
// were running, each counted as failed. Its last line counts the tests
// (subtests included): "tests: N passed, N failed, N skipped".
//
//	go test -race -json ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() { os.Exit(run(os.Stdin, os.Stdout)) }

type key struct{ pkg, test string }

func run(in io.Reader, out io.Writer) int {
	outputs := map[key][]string{}
	running := map[key]bool{} // started, no outcome yet
	var skipped []string
	failed := false
	var passes, fails int
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "run":
			running[k] = true
		case "output":
			if e.Test != "" || !strings.HasPrefix(e.Output, "=== ") {
				outputs[k] = append(outputs[k], e.Output)
			}
		case "skip":
			if e.Test != "" {
				skipped = append(skipped, fmt.Sprintf("  %s %s: %s", e.Package, e.Test, reason(outputs[k])))
			} else {
				fmt.Fprintf(out, "?    %s (no tests)\n", e.Package)
			}
			delete(outputs, k)
			delete(running, k)
		case "pass":
			if e.Test != "" {
				passes++
			}
			if e.Test == "" {
				fmt.Fprintf(out, "ok   %s %.1fs\n", e.Package, e.Elapsed)
			}
			delete(outputs, k)
			delete(running, k)
		case "fail":
			failed = true
			if e.Test != "" {
				fails++
				fmt.Fprintf(out, "--- FAIL: %s %s (%.1fs)\n%s", e.Package, e.Test, e.Elapsed, strings.Join(outputs[k], ""))
			} else {
				fmt.Fprintf(out, "FAIL %s %.1fs\n%s", e.Package, e.Elapsed, strings.Join(outputs[k], ""))
				fails += unfinished(out, e.Package, running, outputs)
			}
			delete(outputs, k)
			delete(running, k)
		}
	}
	if len(skipped) > 0 {
		sort.Strings(skipped)
		fmt.Fprintf(out, "\nskipped (%d), each with its reason:\n%s\n", len(skipped), strings.Join(skipped, "\n"))
	} else {
		fmt.Fprintln(out, "\nno test skipped")
	}
	if failed {
		fmt.Fprintln(out, "FAIL")
	}
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", passes, fails, len(skipped))
	if failed {
		return 1
	}
	return 0
}

// maxUnfinishedLines bounds the output shown of a package's unfinished
// tests (a timeout's goroutine dump runs to thousands of lines).
const maxUnfinishedLines = 200

// unfinished reports the tests of pkg that were running when the package
// failed (no pass, fail or skip came for them: the test binary died of a
// -timeout or a panic), prints their names with the panic line and their
// output (bounded), forgets them, and returns how many there were: each
// counts as failed.
func unfinished(out io.Writer, pkg string, running map[key]bool, outputs map[key][]string) int {
	var names []string
	for k := range running {
		if k.pkg == pkg && k.test != "" {
			names = append(names, k.test)
		}
	}
	sort.Strings(names)
	var lines []string
	cause := ""
	for _, n := range names {
		k := key{pkg, n}
		for _, l := range outputs[k] {
			if cause == "" && strings.HasPrefix(l, "panic: ") {
				cause = strings.TrimSpace(l)
			}
			if !strings.HasPrefix(l, "=== ") {
				lines = append(lines, l)
			}
		}
		delete(running, k)
		delete(outputs, k)
	}
	if len(names) == 0 {
		return 0
	}
	if cause == "" {
		cause = "the test binary ended without their outcome"
	}
	fmt.Fprintf(out, "--- FAIL: %s: %s; tests that never finished: %s\n", pkg, cause, strings.Join(names, ", "))
	if len(lines) > maxUnfinishedLines {
		more := len(lines) - maxUnfinishedLines
		lines = append(lines[:maxUnfinishedLines], fmt.Sprintf("... (%d more lines)\n", more))
	}
	fmt.Fprint(out, strings.Join(lines, ""))
	return len(names)
}

// reason is what a skipped test said: its output without go test's own
// "--- SKIP" line and file:line prefixes.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if i := strings.Index(l, ".go:"); i >= 0 {
			if j := strings.Index(l[i:], ": "); j >= 0 {
				l = l[i+j+2:]
			}
		}
		parts = append(parts, l)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}
