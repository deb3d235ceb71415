package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GoBenchmark is one benchmark of `go test -bench` output.
type GoBenchmark struct {
	// Package is the import path, from the "pkg:" line before it or the
	// package's final "FAIL" line.
	Package string
	// Name is the name as printed, with the -GOMAXPROCS suffix
	// ("BenchmarkWhoami-2"); "" for a package that failed as a whole
	// (build failure, panic).
	Name string
	// Iterations is the b.N of the result.
	Iterations int64
	// Metrics are the value/unit pairs in the order printed: ns/op first,
	// then B/op, allocs/op and reported metrics.
	Metrics []Metric
	// Status is "" for a result, "skip" or "fail".
	Status string
	// Reason is the first line of a skip's or failure's output.
	Reason string
}

// Metric is one value/unit pair of a benchmark result.
type Metric struct {
	Value float64
	Unit  string
}

// NsPerOp returns the ns/op metric, and whether there is one.
func (b GoBenchmark) NsPerOp() (float64, bool) {
	for _, m := range b.Metrics {
		if m.Unit == "ns/op" {
			return m.Value, true
		}
	}
	return 0, false
}

var (
	goBenchResult = regexp.MustCompile(`^(Benchmark\S*)\s+([0-9]+)\s+(.+)$`)
	// A status line; without -v a failure inside the timed runs follows
	// the name on its line: "BenchmarkX-2 \t--- FAIL: BenchmarkX-2".
	goBenchStatus = regexp.MustCompile(`^(?:Benchmark\S*\s+)?--- (SKIP|FAIL): (Benchmark\S*)`)
	goPkgEnd      = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)(?:\s+(.*))?$`)
	// goNoise are the lines of go test's frame that say nothing about a
	// failure.
	goNoise = regexp.MustCompile(`^(\s*$|PASS$|FAIL$|exit status \d+$|goos: |goarch: |cpu: |# |=== |--- BENCH: |Benchmark\S*$)`)
)

// ParseGoBench reads `go test -bench` output (with or without -v) and
// returns every benchmark result, skipped or failed benchmark, and failed
// package, in the order seen. Lines it does not know are ignored.
func ParseGoBench(r io.Reader) ([]GoBenchmark, error) {
	var out []GoBenchmark
	pkg := ""   // from the last "pkg:" line of the current package
	start := 0  // index in out of the current package's first entry
	last := ""  // the last indented line since a benchmark's name (-v prints its log before its status)
	await := -1 // index in out of a status whose reason is the next indented line (without -v)
	other := "" // the current package's first line nothing else claims (a compile error, a panic)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if t := strings.TrimSpace(line); t != "" && (line[0] == ' ' || line[0] == '\t') {
			if await >= 0 {
				out[await].Reason, await = t, -1
			} else {
				last = t
			}
			continue
		}
		await = -1
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(line, "pkg: "))
		case goBenchStatus.MatchString(line):
			m := goBenchStatus.FindStringSubmatch(line)
			b := GoBenchmark{Package: pkg, Name: m[2], Status: strings.ToLower(m[1]), Reason: last}
			out = append(out, b)
			if last == "" {
				await = len(out) - 1
			}
			last = ""
		case goBenchResult.MatchString(line):
			m := goBenchResult.FindStringSubmatch(line)
			if b, ok := parseGoBenchResult(pkg, m[1], m[2], m[3]); ok {
				out = append(out, b)
			}
			last = ""
		case goPkgEnd.MatchString(line):
			m := goPkgEnd.FindStringSubmatch(line)
			p := m[2]
			// Without -v a failure before the first result is printed
			// before the "pkg:" line: its package is known only now.
			failed := false
			for i := start; i < len(out); i++ {
				if out[i].Package == "" {
					out[i].Package = p
				}
				failed = failed || out[i].Status == "fail"
			}
			if m[1] == "FAIL" && !failed {
				reason := other
				if t := strings.TrimSpace(m[3]); strings.HasPrefix(t, "[") {
					reason = strings.TrimSpace(t + " " + other)
				}
				out = append(out, GoBenchmark{Package: p, Status: "fail", Reason: reason})
			}
			pkg, start, last, other = "", len(out), "", ""
		default:
			last = ""
			if other == "" && !goNoise.MatchString(line) {
				other = strings.TrimSpace(line)
			}
		}
	}
	return out, sc.Err()
}

// parseGoBenchResult parses the fields after a result's name: iterations,
// then value/unit pairs.
func parseGoBenchResult(pkg, name, iters, rest string) (GoBenchmark, bool) {
	n, err := strconv.ParseInt(iters, 10, 64)
	if err != nil {
		return GoBenchmark{}, false
	}
	f := strings.Fields(rest)
	if len(f) == 0 || len(f)%2 != 0 {
		return GoBenchmark{}, false
	}
	b := GoBenchmark{Package: pkg, Name: name, Iterations: n}
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return GoBenchmark{}, false
		}
		b.Metrics = append(b.Metrics, Metric{Value: v, Unit: f[i+1]})
	}
	return b, true
}

// GoOptions configure RunGo. Zero fields take their defaults.
type GoOptions struct {
	// Dir is the module's root; default the working directory.
	Dir string
	// Packages are the package patterns; default every package under
	// ./pkg/ that has a Benchmark function.
	Packages []string
	// Benchtime is go test's -benchtime; default "1s".
	Benchtime string
	// Output, if set, receives go test's output as it comes.
	Output io.Writer
}

// RunGo runs the project's Go benchmarks (`go test -run '^$' -bench .
// -benchtime ... -v`) and parses their results. A package that fails to
// build or whose benchmarks fail is reported among the results (Status
// "fail"), not as an error; the error is for go test not running at all.
func RunGo(ctx context.Context, opts GoOptions) ([]GoBenchmark, error) {
	if opts.Benchtime == "" {
		opts.Benchtime = "1s"
	}
	if opts.Dir == "" {
		opts.Dir = "."
	}
	pkgs := opts.Packages
	if len(pkgs) == 0 {
		var err error
		if pkgs, err = benchPackages(filepath.Join(opts.Dir, "pkg")); err != nil {
			return nil, fmt.Errorf("bench go: %w", err)
		}
		if len(pkgs) == 0 {
			return nil, nil
		}
	}
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchtime", opts.Benchtime, "-count", "1", "-v"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Dir
	var buf bytes.Buffer
	var w io.Writer = &buf
	if opts.Output != nil {
		w = io.MultiWriter(&buf, opts.Output)
	}
	cmd.Stdout, cmd.Stderr = w, w
	runErr := cmd.Run()
	res, err := ParseGoBench(&buf)
	if err != nil {
		return nil, fmt.Errorf("bench go: %w", err)
	}
	var ee *exec.ExitError
	if runErr != nil && !errors.As(runErr, &ee) {
		return res, fmt.Errorf("bench go: go test: %w", runErr)
	}
	if runErr != nil && !slices.ContainsFunc(res, func(b GoBenchmark) bool { return b.Status == "fail" }) {
		// go test failed without saying where: keep the evidence.
		tail := buf.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return res, fmt.Errorf("bench go: go test: %w\n%s", runErr, tail)
	}
	return res, nil
}

// benchPackages lists "./pkg/..." directories below root (relative, in
// go's ./ form) whose test files declare a Benchmark function.
func benchPackages(root string) ([]string, error) {
	base := filepath.Dir(root)
	seen := map[string]bool{}
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		if seen[dir] {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("\nfunc Benchmark")) {
			seen[dir] = true
			rel, err := filepath.Rel(base, dir)
			if err != nil {
				return err
			}
			pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(pkgs)
	return pkgs, err
}
