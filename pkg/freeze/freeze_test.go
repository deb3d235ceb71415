package freeze

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

func TestProcState(t *testing.T) {
	for in, want := range map[string]string{
		"12 (sh) S 1 2 3":         "S",
		"13 (a) b) T 1 2":         "T",
		"14 (x)":                  "",
		"15 (weird ) name) R 0 0": "R",
	} {
		if got := procState(in); got != want {
			t.Errorf("procState(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"12 (sh) S 1 2 3":         "sh",
		"15 (weird ) name) R 0 0": "weird ) name",
		"16 no name":              "",
	} {
		if got := procComm(in); got != want {
			t.Errorf("procComm(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFreezeStopsAForkingWriter runs All and Thaw in a helper process
// alone in its own PID namespace with a shell that forks a writer every
// few milliseconds: after All returns, the file does not grow; after Thaw
// it does again.
func TestFreezeStopsAForkingWriter(t *testing.T) {
	if os.Getenv("FREEZE_HELPER") != "" || os.Getenv("FREEZE_STARTING_HELPER") != "" {
		return
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root is needed for a PID namespace of its own (CI runs as root)")
	}
	f := t.TempDir() + "/grows"
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestFreezeHelper$")
	cmd.Env = append(os.Environ(), "FREEZE_HELPER="+f)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "frozen ok") || !strings.Contains(string(out), "thawed ok") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

// TestFreezeSparesAStartingExec runs All in a PID namespace where a
// process named as runc's init of an exec (runc:[2:INIT]) is there: All
// does not stop it (the engine would wait for it for ever) and stops
// nothing while it is there; once it is gone, All stops the rest.
func TestFreezeSparesAStartingExec(t *testing.T) {
	if os.Getenv("FREEZE_HELPER") != "" || os.Getenv("FREEZE_STARTING_HELPER") != "" {
		return
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root is needed for a PID namespace of its own (CI runs as root)")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		testenv.Missing(t, "sleep(1) not found")
	}
	dir := t.TempDir()
	fake := dir + "/runc:[2:INIT]"
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestFreezeStartingHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "FREEZE_STARTING_HELPER="+fake)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "spared ok") || !strings.Contains(string(out), "frozen ok") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func TestFreezeStartingHelper(t *testing.T) {
	fake := os.Getenv("FREEZE_STARTING_HELPER")
	if fake == "" {
		return // run by TestFreezeSparesAStartingExec, in a PID namespace
	}
	if os.Getpid() == 1 {
		c := exec.Command(os.Args[0], "-test.run=^TestFreezeStartingHelper$", "-test.v")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return
	}
	other := exec.Command("sh", "-c", "while :; do :; done")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	starting := exec.Command(fake, "1000")
	if err := starting.Start(); err != nil {
		t.Fatal(err)
	}
	defer starting.Process.Kill()
	state := func(p *os.Process) string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
		return procState(string(b))
	}
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(starting.Process.Pid) + "/comm")
		if strings.TrimSpace(string(b)) == "runc:[2:INIT]" {
			break
		}
		time.Sleep(time.Millisecond) // until it has exec'd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := All(ctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("All with a starting exec = %v, want it to wait for the start", err)
	}
	if s := state(starting.Process); s == "T" || s == "t" {
		t.Fatal("All stopped the process the runtime is starting")
	}
	if s := state(other.Process); s == "T" || s == "t" {
		t.Fatal("All stopped a process while an exec was starting")
	}
	t.Log("spared ok")
	_ = starting.Process.Kill()
	_, _ = starting.Process.Wait()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := All(ctx); err != nil {
		t.Fatal(err)
	}
	if s := state(other.Process); s != "T" && s != "t" {
		t.Fatalf("after the start was over All left a process in state %q", s)
	}
	t.Log("frozen ok")
	if err := Thaw(); err != nil {
		t.Fatal(err)
	}
}

func TestFreezeHelper(t *testing.T) {
	f := os.Getenv("FREEZE_HELPER")
	if f == "" {
		return // run by TestFreezeStopsAForkingWriter, in a PID namespace
	}
	if rerunAsChild(t, "TestFreezeHelper") {
		return
	}
	size := growingFile(t, f)
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := All(ctx); err != nil {
		t.Fatal(err)
	}
	before := size()
	time.Sleep(200 * time.Millisecond)
	if after := size(); after != before || before == 0 {
		t.Fatalf("the file grew from %d to %d after All returned", before, after)
	}
	t.Log("frozen ok " + strconv.FormatInt(before, 10))
	if err := Thaw(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if size() == before {
		t.Fatal("the file did not grow after Thaw")
	}
	t.Log("thawed ok")
}

// rerunAsChild runs test name again in a child process when this one is
// PID 1 (unshare's child in a PID namespace of its own), because All
// skips PID 1; it reports whether it did, and the caller then returns.
func rerunAsChild(t *testing.T, name string) bool {
	t.Helper()
	if os.Getpid() != 1 {
		return false
	}
	c := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return true
}

// growingFile starts a shell that appends a line to f every 5 ms, each
// from a new subshell (so processes keep starting), until the end of t,
// and returns a reader of f's size.
func growingFile(t *testing.T, f string) (size func() int64) {
	t.Helper()
	w := exec.Command("sh", "-c", "while :; do (echo x >> "+f+"); sleep 0.005; done")
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
	return func() int64 {
		st, _ := os.Stat(f)
		if st == nil {
			return 0
		}
		return st.Size()
	}
}
