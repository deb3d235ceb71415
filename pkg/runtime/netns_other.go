//go:build !linux

package runtime

import (
	"context"
	"fmt"
	"net"
	goruntime "runtime"
)

func openNetnsOf(int, string) (int, error) {
	return -1, fmt.Errorf("%w: network namespaces are a Linux feature (this is %s)", ErrNetnsUnavailable, goruntime.GOOS)
}

func closeNetns(int) error { return nil }

func dialInNetns(context.Context, int, string) (net.Conn, error) {
	return nil, ErrNetnsUnavailable
}

func probeOwnNetns() error {
	return fmt.Errorf("%w: network namespaces are a Linux feature (this is %s)", ErrNetnsUnavailable, goruntime.GOOS)
}
