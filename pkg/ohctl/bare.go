package ohctl

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/control"
)

// bareRepositoryCheck is the doctor check ohctl makes itself, as the user
// who runs it: whether the user's global git config has
// safe.bareRepository=explicit. git's ownership check refuses every
// repository ohd's agent makes (another uid owns it), and the agent can
// never write in a directory the user owns (package gitboundary), so
// ohd's conversations do not need it; but a directory of the user's that
// someone else filled with HEAD, objects/ and refs/ (an agent of an
// earlier ohd, which ran as the user; an unpacked archive) is an
// implicit bare repository the user owns, which `git log` there reads
// (its config, its programs). With safe.bareRepository=explicit git opens
// no implicit bare repository.
func bareRepositoryCheck(ctx context.Context, home, xdg string) control.DoctorCheck {
	ck := control.DoctorCheck{Check: "safe-bare-repository"}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "config", "--global", "--get", "safe.bareRepository")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LC_ALL=C"}
	if xdg != "" {
		cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+xdg)
	}
	out, err := cmd.Output()
	v := strings.TrimSpace(string(out))
	var ee *exec.ExitError
	switch {
	case err == nil && strings.EqualFold(v, "explicit"):
		ck.Status, ck.Detail = "ok", "safe.bareRepository=explicit in your global git config: your git opens no implicit bare repository, whoever filled it into a directory of yours"
	case err == nil || errors.As(err, &ee) && ee.ExitCode() == 1:
		now := "unset"
		if v != "" {
			now = v
		}
		ck.Status = "warn"
		ck.Detail = "safe.bareRepository is " + now + " in your global git config: ohd's agent cannot write in a directory of yours (it runs as its own uid and every directory it writes in is lent to it), but a directory of yours that something else filled with HEAD, objects/ and refs/ (an agent of an earlier ohd, which ran as you; an unpacked archive) is a repository `git log` there reads as you, config and programs; run `git config --global safe.bareRepository explicit` to have git open none"
	default:
		ck.Status, ck.Detail = "warn", "could not read your global git config: "+err.Error()+"; set `git config --global safe.bareRepository explicit`"
	}
	return ck
}
