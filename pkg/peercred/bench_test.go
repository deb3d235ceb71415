package peercred

import (
	"context"
	"net"
	"path/filepath"
	"testing"
)

func BenchmarkConnContext(b *testing.B) {
	path := filepath.Join(b.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := FromContext(ConnContext(ctx, sc)); !ok {
			b.Fatal("no credentials")
		}
	}
}
