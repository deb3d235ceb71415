package openhands

import "testing"

func TestAcceptedVersion(t *testing.T) {
	for v, want := range map[string]bool{
		ContractVersion: true, "1.28.0": true, "1.54.0": true, "2.0.0": true, "1.100.3": true,
		"1.27.9": false, "0.99.0": false, "3a21a0b": false, "dev": false, "v1.43.1": false,
		"1.43": false, "1.43.1.2": false, "1.43.x": false, "": false, "1..0": false, "1.28.0-rc1": false,
	} {
		if got := AcceptedVersion(v); got != want {
			t.Errorf("AcceptedVersion(%q) = %v, want %v", v, got, want)
		}
	}
}
