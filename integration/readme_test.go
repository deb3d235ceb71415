package integration

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// The README's commands are run as a new user would run them: on a fresh
// clone, with the daemon's defaults (as root: /var/lib/ohd and /run/ohd).
// Because that touches the system paths, the tests refuse to run where an
// ohd installation already uses them.

const quickstartMarker = ".ohd-readme-test"

// freshClone clones this repository and lays the working tree's current
// files over it, so uncommitted work is tested too; it returns the clone.
func freshClone(t *testing.T) string {
	t.Helper()
	root := moduleRoot()
	dir := filepath.Join(testenv.TempDir(t), "ohd")
	run(t, "git", "clone", "-q", "--no-hardlinks", root, dir)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		_ = os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// claimDefaultDirs makes sure the default state and runtime directories
// are free for the test (or left by an earlier run of it) and removes
// them afterwards.
func claimDefaultDirs(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, dir := range []string{"/var/lib/ohd", "/run/ohd"} {
		entries, err := os.ReadDir(dir)
		if err == nil && len(entries) > 0 {
			if _, err := os.Stat(filepath.Join(dir, quickstartMarker)); err != nil {
				testenv.Missing(t, "%s is in use by an ohd installation; the README tests run the daemon with its defaults and will not touch it", dir)
			}
		}
		_ = os.RemoveAll(dir)
	}
	t.Cleanup(func() {
		// Containers the test's daemon left (a failed step): the server id
		// is in the store, which only the daemon reads; its containers are
		// the ones bind-mounting /run/ohd/conversations.
		out, _ := dockerCmd("ps", "-aq", "--filter", "label=dev.ohd.server").Output()
		for _, id := range strings.Fields(string(out)) {
			mounts, _ := dockerCmd("inspect", "--format", "{{range .Mounts}}{{.Source}} {{end}}", id).Output()
			if strings.Contains(string(mounts), "/run/ohd/conversations/") {
				_ = dockerCmd("rm", "-f", id).Run()
			}
		}
		os.RemoveAll("/var/lib/ohd")
		os.RemoveAll("/run/ohd")
	})
}

// readmeBlock returns the commands of the first fenced sh block after the
// line starting with heading ("" means the file's first block).
func readmeBlock(t *testing.T, readme, heading string) []string {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found, in := heading == "", false
	var cmds []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found:
			found = strings.HasPrefix(line, heading)
		case !in && strings.HasPrefix(line, "```sh"):
			in = true
		case in && strings.HasPrefix(line, "```"):
			return cmds
		case in:
			cmd, _, _ := strings.Cut(line, "#")
			if cmd = strings.TrimSpace(cmd); cmd != "" {
				cmds = append(cmds, cmd)
			}
		}
	}
	t.Fatalf("README has no sh block after %q", heading)
	return nil
}

// background starts a shell command in dir and stops it (SIGTERM to its
// process group) when the test ends.
func background(t *testing.T, dir, cmd string, env []string) *testenv.SyncBuffer {
	t.Helper()
	out := &testenv.SyncBuffer{}
	c := exec.Command("/bin/sh", "-c", cmd)
	c.Dir, c.Stdout, c.Stderr = dir, out, out
	c.Env = env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return out
}

func shell(t *testing.T, dir, cmd string, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	c.Dir, c.Env = dir, env
	out, err := c.CombinedOutput()
	return string(out), err
}

// userEnv is a new user's environment: the machine's PATH (with Go),
// nothing of ohd's.
func userEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for _, k := range []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOFLAGS", "GOPROXY", "DOCKER_HOST"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func TestREADMERunCommandStartsTheDaemon(t *testing.T) {
	// Docker only by design: it runs the README's first command as written, which serves Docker's runtime (the default).
	claimDefaultDirs(t)
	clone := freshClone(t)
	top := readmeBlock(t, filepath.Join(clone, "README.md"), "")
	if len(top) < 2 || !strings.Contains(top[1], "make test") {
		t.Fatalf("the README does not open with the run and test commands: %q", top)
	}
	logs := background(t, clone, top[0], userEnv())
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, err := shell(t, clone, "bin/ohctl ls", userEnv())
		if err == nil {
			if !strings.Contains(out, "no conversations") && !strings.HasPrefix(out, "ID ") {
				t.Errorf("ohctl ls printed %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("`%s` did not serve within 5 minutes; ohctl ls: %v %s\n--- its output ---\n%s", top[0], err, out, tail(logs.String(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join("/var/lib/ohd", quickstartMarker), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestREADMEQuickStart(t *testing.T) {
	// Docker only by design: it runs the README's quick start as written, which is Docker's (the default runtime).
	claimDefaultDirs(t)
	testenv.RequireDocker(t)
	testimage.Ensure(t) // make test-image below then finds it current
	clone := freshClone(t)
	cmds := readmeBlock(t, filepath.Join(clone, "README.md"), "## Quick start")
	env := userEnv()
	var created string
	for _, cmd := range cmds {
		if strings.Contains(cmd, "<ID>") {
			if created == "" {
				t.Fatalf("%q needs an id, but no create ran before it", cmd)
			}
			cmd = strings.ReplaceAll(cmd, "<ID>", created)
		}
		if strings.HasSuffix(cmd, "&") {
			background(t, clone, strings.TrimSuffix(cmd, "&"), env)
			waitFor(t, time.Minute, "the daemon to answer", func() bool {
				_, err := shell(t, clone, "bin/ohctl version | grep -q api", env)
				return err == nil
			})
			continue
		}
		out, err := shell(t, clone, cmd, env)
		if err != nil {
			t.Fatalf("quick start step %q failed: %v\n%s", cmd, err, out)
		}
		if strings.Contains(cmd, "ohctl create") {
			for _, f := range strings.Fields(out) {
				if len(f) == 36 && strings.Count(f, "-") == 4 {
					created = f
					break
				}
			}
			if created == "" {
				t.Fatalf("create printed no id:\n%s", out)
			}
		}
		if strings.HasSuffix(cmd, "ohctl ls") && (created == "" || !strings.Contains(out, created)) {
			t.Errorf("`%s` does not show the created conversation %s:\n%s", cmd, created, out)
		}
	}
	if created == "" {
		t.Fatal("the quick start created nothing")
	}
	if err := os.WriteFile(filepath.Join("/var/lib/ohd", quickstartMarker), nil, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}
