package integration

import (
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestExecForwardsStdinUserAndWorkdir: `ohctl exec` gives the command
// ohctl's standard input (to EOF), and --user and --workdir choose who
// runs it and where.
func TestExecForwardsStdinUserAndWorkdir(t *testing.T) {
	d := dockerDaemon(t)
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
	t.Cleanup(func() { _, _ = d.ohctlErr("rm", "--discard", c.ID) })

	input := "line one\nline two\n" + strings.Repeat("x", 200000) + "\n"
	out, err := d.ohctlIn(input, "exec", c.ID, "--", "sh", "-c", `n=0; while IFS= read -r l; do n=$((n+1)); last=${#l}; done; echo "lines=$n last=$last"`)
	if err != nil || strings.TrimSpace(out) != "lines=3 last=200000" {
		t.Errorf("exec with stdin = %q, %v; want the command to read all 3 lines", out, err)
	}
	out, err = d.ohctlIn("", "exec", "--workdir", "/tmp", "--user", "4242:4343", c.ID, "--", "sh", "-c",
		`echo "pwd=$PWD"; while read k v rest; do case $k in Uid:|Gid:) echo "$k$v";; esac; done < /proc/self/status`)
	if err != nil || !strings.Contains(out, "pwd=/tmp") || !strings.Contains(out, "Uid:4242") || !strings.Contains(out, "Gid:4343") {
		t.Errorf("exec --workdir /tmp --user 4242:4343 = %q, %v", out, err)
	}
	if out, err := d.ohctlErr("exec", "--workdir", "relative", c.ID, "--", "true"); err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Errorf("exec --workdir relative = %q, %v; want a refusal", out, err)
	}
}
