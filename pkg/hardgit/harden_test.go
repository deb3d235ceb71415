package hardgit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// markerFile is where the stand-in programs of one test record their
// names, one per run.
type markerFile string

// program writes an executable stand-in called name that appends its name
// to the marker file; a filter stand-in passes its input through.
func (f markerFile) program(t *testing.T, name string, filter bool) string {
	t.Helper()
	pass := "cat >/dev/null 2>&1 </dev/null || true"
	if filter {
		pass = "cat"
	}
	p := filepath.Join(testenv.TempDir(t), name)
	testenv.WriteFile(t, p, "#!/bin/sh\necho "+name+" >> "+string(f)+"\n"+pass+"\n")
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// ran returns the names the stand-ins recorded, in order.
func (f markerFile) ran(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(string(f))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestEmptyFilterOverrideDisablesFilter checks, on the installed git, the
// mechanism the hardening relies on: a filter driver whose clean, smudge
// and process are overridden to empty (and required=false) runs nothing,
// while without the override it runs.
func TestEmptyFilterOverrideDisablesFilter(t *testing.T) {
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	e := markerFile(filepath.Join(testenv.TempDir(t), "fired"))
	testenv.Git(t, dir, "config", "filter.a=b.clean", e.program(t, "clean", true)) // a driver name with "="
	testenv.Git(t, dir, "config", "filter.a=b.smudge", e.program(t, "smudge", true))
	testenv.Git(t, dir, "config", "filter.a=b.required", "true")
	testenv.Git(t, dir, "config", "filter.P.process", e.program(t, "process", true))
	testenv.WriteFile(t, filepath.Join(dir, ".gitattributes"), "*.x filter=a=b\n*.p filter=P\n")

	run := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, append(testenv.GitEnv(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	out := testenv.Git(t, dir, "config", "-z", "--get-regexp", `^filter\.`)
	entries, err := parseConfigList([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	drivers := filterDrivers(entries)
	if diff := cmp.Diff([]string{"P", "a=b"}, drivers); diff != "" {
		t.Fatalf("filterDrivers mismatch (-want +got):\n%s", diff)
	}
	off := ConfigEnv(disableFilters(drivers))

	testenv.WriteFile(t, filepath.Join(dir, "f.x"), "x\n")
	testenv.WriteFile(t, filepath.Join(dir, "f.p"), "p\n")
	run(off, "add", "f.x", "f.p")
	run(off, "commit", "-q", "-m", "filtered files")
	for _, f := range []string{"f.x", "f.p"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	run(off, "checkout", "--", "f.x", "f.p")
	if got := e.ran(t); len(got) != 0 {
		t.Errorf("with empty overrides git ran %q", got)
	}
	testenv.WriteFile(t, filepath.Join(dir, "f.x"), "changed\n")
	run(nil, "add", "f.x")
	if got := e.ran(t); !slices.Contains(got, "clean") {
		t.Errorf("without the overrides git ran %q, want the clean filter (the check above proves nothing otherwise)", got)
	}
}

// TestRunnerRunsNothingTheRepositoryNames: a repository whose config
// names an fsmonitor, a hooks path with hooks, a filter driver, a pager
// and an editor makes plain git run them (the control); the same
// commands through a Runner run none.
func TestRunnerRunsNothingTheRepositoryNames(t *testing.T) {
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	e := markerFile(filepath.Join(testenv.TempDir(t), "fired"))
	hooks := testenv.TempDir(t)
	for _, h := range []string{"pre-commit", "post-commit", "reference-transaction", "post-index-change"} {
		if err := os.Rename(e.program(t, "hook-"+h, false), filepath.Join(hooks, h)); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range [][2]string{
		{"core.fsmonitor", e.program(t, "fsmonitor", false)},
		{"core.hooksPath", hooks},
		{"filter.evil.clean", e.program(t, "filter-clean", true)},
		{"filter.evil.smudge", e.program(t, "filter-smudge", true)},
		{"core.pager", e.program(t, "pager", false)},
		{"core.editor", e.program(t, "editor", false)},
	} {
		testenv.Git(t, dir, "config", kv[0], kv[1])
	}
	testenv.WriteFile(t, filepath.Join(dir, ".gitattributes"), "*.txt filter=evil\n")
	// Not `git diff`: through a Runner it fails on diff.external="" (git
	// 2.39 tries to run the empty command) unless given --no-ext-diff.
	commands := [][]string{
		{"add", "-A"},
		{"commit", "-q", "-m", "c"},
		{"status"},
	}

	git, err := Look()
	if err != nil {
		t.Fatal(err)
	}
	r := Runner{Path: git, Timeout: time.Minute, EUID: os.Geteuid()}
	target := Target{Dir: dir, GitDir: filepath.Join(dir, ".git"), WorkTree: dir, UID: os.Geteuid(), GID: os.Getegid()}
	testenv.WriteFile(t, filepath.Join(dir, "a.txt"), "a\n")
	for _, args := range commands {
		if _, err := r.Run(context.Background(), target, Opts{}, args...); err != nil {
			t.Fatalf("Run(%q): %v", args, err)
		}
	}
	if got := e.ran(t); len(got) != 0 {
		t.Errorf("the Runner's git ran %q", got)
	}

	// Control: plain git, same commands on a new change.
	testenv.WriteFile(t, filepath.Join(dir, "b.txt"), "b\n")
	for _, args := range commands {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, append(testenv.GitEnv(), "GIT_PAGER=")
		_ = cmd.Run()
	}
	for _, want := range []string{"fsmonitor", "hook-pre-commit", "hook-post-commit", "filter-clean"} {
		if !slices.Contains(e.ran(t), want) {
			t.Errorf("control: plain git did not run %s (ran %q): the test would prove nothing", want, e.ran(t))
		}
	}
}
