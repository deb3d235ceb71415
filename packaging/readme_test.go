package packaging

import (
	"strings"
	"testing"
)

// TestUpstreamUnitInReadme: the README's Canvas setup shows exactly the
// shipped upstream unit, the one integration.TestSystemdUpstreamUnit
// starts under systemd.
func TestUpstreamUnitInReadme(t *testing.T) {
	readme := readFile(t, "../README.md")
	const intro = "The upstream's unit is the shipped `packaging/systemd/openhands-upstream.service`"
	i := strings.Index(readme, intro)
	if i < 0 {
		t.Fatalf("README.md has no %q", intro)
	}
	rest := readme[i:]
	start := strings.Index(rest, "```ini\n")
	if start < 0 {
		t.Fatal("README.md: no ini block after the upstream unit's introduction")
	}
	block := rest[start+len("```ini\n"):]
	end := strings.Index(block, "```\n")
	if end < 0 {
		t.Fatal("README.md: the upstream unit's block does not end")
	}
	if got, want := block[:end], readFile(t, "systemd/openhands-upstream.service"); got != want {
		t.Errorf("README's upstream unit differs from packaging/systemd/openhands-upstream.service:\n--- README\n%s--- shipped\n%s", got, want)
	}
}
