package gitboundary

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// bigTree makes n files in directories of 100, as a repository's work tree.
func bigTree(b *testing.B, n int) string {
	b.Helper()
	root := filepath.Join(b.TempDir(), "tree")
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%05d.go", i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(p, []byte("package x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// BenchmarkApply10000Files is the walk an in-place or plain-folder create
// pays: every ACL of a 10,000-file tree written.
func BenchmarkApply10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	for b.Loop() {
		b.StopTimer()
		if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: filepath.Join(b.TempDir(), "kept")}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Apply(root, testIDs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyAgain10000Files is a later start's walk: nothing to write.
func BenchmarkApplyAgain10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	if _, err := Apply(root, testIDs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Apply(root, testIDs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelease10000Files is an in-place or plain-folder removal's
// walk: every ACL entry removed.
func BenchmarkRelease10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	kept := filepath.Join(b.TempDir(), "kept")
	for b.Loop() {
		b.StopTimer()
		if _, err := Apply(root, testIDs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMoveOnly10000Files is a worktree removal's walk: only the
// search for the agent's git directories.
func BenchmarkMoveOnly10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	kept := filepath.Join(b.TempDir(), "kept")
	for b.Loop() {
		if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept, MoveOnly: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBorrow10000Files is what lending the user's directories adds
// to a create (in place, plain folder, worktree): a walk of directories
// only, each lent once.
func BenchmarkBorrow10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	kept := filepath.Join(b.TempDir(), "kept")
	for b.Loop() {
		b.StopTimer()
		if _, err := Release(root, ReleaseOptions{IDs: testIDs, KeptDir: kept, MoveOnly: true}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Borrow(root, testIDs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatch10000Files is what starting the watcher adds to a create:
// a walk of directories only, one inotify watch each (its Close, at the
// removal, is not counted).
func BenchmarkWatch10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	for b.Loop() {
		w, err := Watch(root, testIDs, WatchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
