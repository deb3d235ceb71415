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

// TestREADMEBesideCanvasDockerPorts: issue 28 acceptance 7. The README's
// section that runs ohd beside Agent Canvas's Docker install moves ohd
// and its upstream off Canvas's ports (8000 for its proxy, 18000 for its
// agent server: config/defaults.json, ref §10), consistently: ohd's
// OHD_UPSTREAM names the port the upstream's ExecStart= listens on, and
// the upstream drop-in's ExecStart= is the shipped one but for the port.
func TestREADMEBesideCanvasDockerPorts(t *testing.T) {
	ohd := readmeFence(t, "To run both on one host, move ohd and its upstream with two drop-ins:")
	readme, err := os.ReadFile(filepath.Join(moduleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(readme), ohd)
	_, rest, _ = strings.Cut(rest, "```ini\n")
	up, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the README's section has no second drop-in (the upstream's)")
	}
	env := map[string]string{}
	for _, line := range strings.Split(ohd, "\n") {
		if kv, ok := strings.CutPrefix(line, "Environment="); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	listenPort := env["OHD_LISTEN"][strings.LastIndex(env["OHD_LISTEN"], ":")+1:]
	upPort := env["OHD_UPSTREAM"][strings.LastIndex(env["OHD_UPSTREAM"], ":")+1:]
	for _, p := range []string{listenPort, upPort} {
		if p == "" || p == "8000" || p == "18000" {
			t.Errorf("the section's drop-in %q uses port %q, want one Canvas's Docker install does not", ohd, p)
		}
	}
	if !strings.Contains(up, "--port "+upPort+"'") || !strings.Contains(up, "ExecStart=\nExecStart=") {
		t.Errorf("the upstream drop-in does not clear ExecStart= and listen on OHD_UPSTREAM's port %s:\n%s", upPort, up)
	}
	shipped, err := os.ReadFile(filepath.Join(moduleRoot(), "packaging", "systemd", "openhands-upstream.service"))
	if err != nil {
		t.Fatal(err)
	}
	_, exec, _ := strings.Cut(string(shipped), "\nExecStart=")
	exec, _, _ = strings.Cut(exec, "\nRestart=")
	_, got, _ := strings.Cut(up, "ExecStart=\nExecStart=")
	if want := strings.Replace(exec, "--port 18000'", "--port "+upPort+"'", 1); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("the upstream drop-in's ExecStart= differs from the shipped unit's but for the port:\n%s\nwant\n%s", got, want)
	}
}
