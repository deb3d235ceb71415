package gitboundary

import (
	"os"
	"testing"
)

func BenchmarkTmpWatchClose10000Files(b *testing.B) {
	root := bigTree(b, 10000)
	for b.Loop() {
		b.StopTimer()
		w, err := Watch(root, testIDs, WatchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTmpRemoveAll10000Files(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		root := bigTree(b, 10000)
		b.StartTimer()
		if err := os.RemoveAll(root); err != nil {
			b.Fatal(err)
		}
	}
}
