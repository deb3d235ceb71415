package journal

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const id = "123e4567-e89b-12d3-a456-426614174000"

func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	if j, err := Read(dir, id, log); j != nil || err != nil {
		t.Fatalf("Read(no journal) = %+v, %v; want nil, nil", j, err)
	}
	want := &Journal{ID: id, Into: "/r.restore-123e4567", CommonDir: "/r/.git", CreatedBranch: "openhands/" + id,
		CreatedAt: "0123456789012345678901234567890123456789", UserStash: []StashEntry{{OID: "a", Message: "WIP on main"}},
		UserStashRead: true, Holder: ProcessIdentity(os.Getpid())}
	if err := Write(dir, want); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, err := Read(dir, id, log)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read after Write mismatch (-want +got):\n%s", diff)
	}
	if err := Remove(dir, id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := Remove(dir, id); err != nil {
		t.Errorf("Remove again = %v, want nil", err)
	}
	if j, err := Read(dir, id, log); j != nil || err != nil {
		t.Errorf("Read after Remove = %+v, %v; want nil, nil", j, err)
	}
}

// TestReadIgnoresUntrustedJournals: a torn journal, another conversation's,
// or one naming a relative path reads as none.
func TestReadIgnoresUntrustedJournals(t *testing.T) {
	for name, content := range map[string]string{
		"torn":     `{"id":"` + id + `","into":"/r.rest`,
		"foreign":  `{"id":"00000000-0000-0000-0000-000000000000","into":"/r.restore"}`,
		"relative": `{"id":"` + id + `","into":"r.restore"}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "restore-"+id+".json"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if j, err := Read(dir, id, slog.New(slog.DiscardHandler)); j != nil || err != nil {
				t.Errorf("Read(%s) = %+v, %v; want nil, nil", content, j, err)
			}
		})
	}
}

func TestHolderGone(t *testing.T) {
	self := ProcessIdentity(os.Getpid())
	if self == "" {
		t.Fatal("ProcessIdentity(this process) is empty")
	}
	tests := []struct {
		holder string
		want   bool
	}{
		{self, false},
		{"", false},             // a journal of an earlier version: unknown
		{"not a holder", false}, // unknown too
		{self + "0", true},      // this pid, another start time: reused
		{"2147483647 1", true},  // no such process
	}
	for _, tc := range tests {
		if got := (&Journal{Holder: tc.holder}).HolderGone(); got != tc.want {
			t.Errorf("Journal{Holder: %q}.HolderGone() = %v, want %v", tc.holder, got, tc.want)
		}
	}
}

// TestClearStaleRefLocks removes the ref locks only when the holder is
// gone.
func TestClearStaleRefLocks(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, gone := range []bool{false, true} {
		common := t.TempDir()
		locks := []string{filepath.Join(common, "refs", "stash.lock"), filepath.Join(common, "packed-refs.lock")}
		if err := os.MkdirAll(filepath.Join(common, "refs"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range locks {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		j := &Journal{ID: id, Holder: ProcessIdentity(os.Getpid())}
		if gone {
			j.Holder = "2147483647 1"
		}
		j.ClearStaleRefLocks(common, log)
		for _, p := range locks {
			if _, err := os.Lstat(p); (err == nil) == gone {
				t.Errorf("holder gone %v: %s exists %v after ClearStaleRefLocks", gone, p, err == nil)
			}
		}
	}
}
