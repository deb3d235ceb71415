package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// smallFS mounts a tmpfs of size bytes on a fresh directory: a real
// filesystem that fills up.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		testenv.Missing(t, "mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file until the filesystem of dir has no space left.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	// The last partial block: write byte by byte until it refuses.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			break
		}
	}
	return path
}

// TestAuditFailsClosedOnAFullDisk: with the state directory's filesystem
// full, the writer's commits fail, AuditErr says so (the broker refuses
// on it), the records stay queued in order, and once space returns the
// writer commits them by itself: none is lost.
func TestAuditFailsClosedOnAFullDisk(t *testing.T) {
	dir := smallFS(t, "4m")
	s, err := Open(filepath.Join(dir, FileName), newKey(t, 1), Options{AuditFlush: 10 * time.Millisecond})
	must(t, err)
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	conv := NewID()
	n := 0
	add := func() {
		s.AuditAsync(AuditRecord{Time: time.Now(), Source: "broker", Conversation: conv, Route: fmt.Sprintf("r%06d", n), Name: strings.Repeat("n", 200), Allowed: true})
		n++
	}
	for range 10 {
		add()
	}
	s.FlushAudit()
	if err := s.AuditErr(); err != nil {
		t.Fatalf("AuditErr with room = %v, want nil", err)
	}

	filler := fill(t, dir)
	for n < 200000 && s.AuditErr() == nil {
		for range 50 {
			add()
		}
		s.FlushAudit()
	}
	err = s.AuditErr()
	if !errors.Is(err, ErrAuditUnavailable) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("AuditErr on a full disk after %d records = %v, want ErrAuditUnavailable naming the full disk", n, err)
	}
	// Records keep arriving (the broker's refusals are audited too) and
	// stay queued; the writer keeps failing meanwhile.
	for range 100 {
		add()
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.AuditErr(); err == nil {
		t.Fatal("AuditErr cleared while the disk is still full")
	}

	must(t, os.Remove(filler))
	deadline := time.Now().Add(10 * time.Second)
	for s.AuditErr() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("AuditErr still %v 10 s after space returned", s.AuditErr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	recs, err := s.Audit(AuditFilter{Conversation: conv})
	must(t, err)
	if len(recs) != n {
		t.Fatalf("%d records in the audit, want all %d", len(recs), n)
	}
	for i, r := range recs {
		if want := fmt.Sprintf("r%06d", i); r.Route != want || (i > 0 && r.Seq <= recs[i-1].Seq) {
			t.Fatalf("record %d = %s seq %d, want %s in order", i, r.Route, r.Seq, want)
		}
	}
	if lost := s.AuditLost(); lost != 0 {
		t.Errorf("AuditLost = %d, want 0", lost)
	}
	s.Close()
	closed = true
	// And the file is sound: it reopens with every record.
	s2, err := Open(filepath.Join(dir, FileName), newKey(t, 1), Options{})
	must(t, err)
	defer s2.Close()
	if recs, err := s2.Audit(AuditFilter{Conversation: conv}); err != nil || len(recs) != n {
		t.Errorf("after reopen: %d records, %v; want %d", len(recs), err, n)
	}
}
