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
}

// TestFreezeStopsAForkingWriter runs All and Thaw in a helper process
// alone in its own PID namespace with a shell that forks a writer every
// few milliseconds: after All returns, the file does not grow; after Thaw
// it does again.
func TestFreezeStopsAForkingWriter(t *testing.T) {
	if os.Getenv("FREEZE_HELPER") != "" {
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

func TestFreezeHelper(t *testing.T) {
	f := os.Getenv("FREEZE_HELPER")
	if f == "" {
		return // run by TestFreezeStopsAForkingWriter, in a PID namespace
	}
	// PID 1 here is unshare's child: this test binary. All skips PID 1,
	// so the helper runs from a child of its own.
	if os.Getpid() == 1 {
		c := exec.Command(os.Args[0], "-test.run=^TestFreezeHelper$", "-test.v")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return
	}
	w := exec.Command("sh", "-c", "while :; do (echo x >> "+f+"); sleep 0.005; done")
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Process.Kill()
	size := func() int64 {
		st, _ := os.Stat(f)
		if st == nil {
			return 0
		}
		return st.Size()
	}
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
