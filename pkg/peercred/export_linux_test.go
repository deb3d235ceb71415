package peercred

import "testing"

func setPeerPIDFD(t *testing.T, on bool) {
	old := usePeerPIDFD
	usePeerPIDFD = on
	t.Cleanup(func() { usePeerPIDFD = old })
}
