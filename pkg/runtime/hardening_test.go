package runtime

import (
	"context"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

func TestHardeningOfOurContainer(t *testing.T) {
	d, server := testDocker(t)
	inst := mustStart(t, d, baseSpec(t, server))
	problems, err := d.Hardening(context.Background(), inst.ContainerID, testenv.UnprivilegedUID, testenv.UnprivilegedGID)
	if err != nil || len(problems) != 0 {
		t.Errorf("Hardening(ours) = %q, %v; want none", problems, err)
	}
	// Another expected user is a problem.
	problems, _ = d.Hardening(context.Background(), inst.ContainerID, 0, 0)
	if len(problems) != 1 || !strings.Contains(problems[0], "agent's user 0:0") {
		t.Errorf("Hardening with another owner = %q", problems)
	}
}

func TestHardeningOfAPlainContainer(t *testing.T) {
	d, server := testDocker(t)
	img := testimage.Ensure(t)
	out, err := dockerCmd("create", "--label", LabelServer+"="+server, "-p", "8000", "--cap-add", "NET_ADMIN", img).CombinedOutput()
	if err != nil {
		t.Fatalf("docker create: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	problems, err := d.Hardening(context.Background(), id, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(problems, "\n")
	for _, want := range []string{"not the agent's user", "capabilities not all dropped", "capabilities added", "no-new-privileges", "no memory limit", "no CPU limit", "no pids limit", "not 127.0.0.1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("Hardening(plain container) lacks %q:\n%s", want, joined)
		}
	}
}
