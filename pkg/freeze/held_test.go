package freeze

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestHeldResumesWhenTheHolderGoes runs Held in a helper process alone
// in its own PID namespace with a shell that forks a writer every few
// milliseconds: a freeze whose holder goes away mid-way is called off and
// the writer resumed; a freeze that finishes first stays frozen for the
// holder's next step.
func TestHeldResumesWhenTheHolderGoes(t *testing.T) {
	if os.Getenv("FREEZE_HELD_HELPER") != "" || os.Getenv("FREEZE_HELPER") != "" || os.Getenv("FREEZE_STARTING_HELPER") != "" {
		return
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root is needed for a PID namespace of its own (CI runs as root)")
	}
	f := t.TempDir() + "/grows"
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestHeldHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "FREEZE_HELD_HELPER="+f)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gone: resumed ok") || !strings.Contains(string(out), "done: frozen ok") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func TestHeldHelper(t *testing.T) {
	f := os.Getenv("FREEZE_HELD_HELPER")
	if f == "" {
		return // run by TestHeldResumesWhenTheHolderGoes, in a PID namespace
	}
	if rerunAsChild(t, "TestHeldHelper") {
		return
	}
	size := growingFile(t, f)
	grows := func() bool {
		before := size()
		time.Sleep(200 * time.Millisecond)
		return size() != before
	}
	time.Sleep(100 * time.Millisecond)

	// The holder goes away while fn, the writer frozen, still works.
	pr, pw := io.Pipe()
	frozen := make(chan struct{})
	go func() {
		<-frozen
		time.Sleep(100 * time.Millisecond)
		pw.Close()
	}()
	err := Held(context.Background(), pr, func(ctx context.Context) error {
		if err := All(ctx); err != nil {
			return err
		}
		close(frozen)
		<-ctx.Done() // a collect under way, called off
		return ctx.Err()
	})
	if !errors.Is(err, ErrHolderGone) {
		t.Fatalf("Held with its holder gone = %v, want ErrHolderGone", err)
	}
	if !grows() {
		t.Fatal("after the holder went away, the writer stays stopped")
	}
	t.Log("gone: resumed ok")

	// fn finishes first: the writer stays frozen.
	pr, pw = io.Pipe()
	defer pw.Close()
	if err := Held(context.Background(), pr, func(ctx context.Context) error { return All(ctx) }); err != nil {
		t.Fatalf("Held = %v", err)
	}
	if grows() {
		t.Fatal("after Held returned, the writer runs again: the freeze did not outlast it")
	}
	t.Log("done: frozen ok")
	if err := Thaw(); err != nil {
		t.Fatal(err)
	}
}
