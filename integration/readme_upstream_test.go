package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEUpstreamUnitIsTheShippedOne: issue 18 point 8, "the README's
// complete Canvas setup is that tested unit". TestSystemdUpstreamUnit
// boots packaging/systemd/openhands-upstream.service; the README shows
// the unit in full, so the two must stay the same text.
func TestREADMEUpstreamUnitIsTheShippedOne(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(moduleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(moduleRoot(), "packaging", "systemd", "openhands-upstream.service"))
	if err != nil {
		t.Fatal(err)
	}
	const start = "```ini\n[Unit]\nDescription=OpenHands agent server"
	_, rest, ok := strings.Cut(string(readme), start)
	if !ok {
		t.Fatalf("README.md shows no upstream unit (a fence starting %q)", start)
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("the README's upstream unit block is not closed")
	}
	block = strings.TrimPrefix(start, "```ini\n") + block + "\n"
	if block != string(shipped) {
		t.Errorf("the README's upstream unit differs from packaging/systemd/openhands-upstream.service (which TestSystemdUpstreamUnit boots):\n--- README\n%s\n--- shipped\n%s", block, shipped)
	}
}
