package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEveryPackageHasADocComment keeps the habit that every package says
// what it is for (tailscale's pkgdoc_test.go).
func TestEveryPackageHasADocComment(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Name}}\t{{.Doc}}", ModuleRoot(t)+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 {
			t.Fatalf("go list line %q", line)
		}
		n++
		if strings.TrimSpace(parts[2]) == "" {
			t.Errorf("package %s has no doc comment", parts[0])
		}
	}
	if n < 10 {
		t.Errorf("go list found only %d packages", n)
	}
}
