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
// repository the agent makes (another uid owns it) but one: a directory
// of the user's that the agent fills with HEAD, objects/ and refs/ is an
// implicit bare repository the user owns, which `git log` there reads
// (its config, its programs) during the conversation. With
// safe.bareRepository=explicit git opens no implicit bare repository.
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
		ck.Status, ck.Detail = "ok", "safe.bareRepository=explicit in your global git config: your git opens no implicit bare repository an agent fills in a directory of yours"
	case err == nil || errors.As(err, &ee) && ee.ExitCode() == 1:
		now := "unset"
		if v != "" {
			now = v
		}
		ck.Status = "warn"
		ck.Detail = "safe.bareRepository is " + now + " in your global git config: an agent can fill a directory of yours with HEAD, objects/ and refs/ during a conversation, and `git log` there reads that repository's config as you (ohctl rm moves it out at the end); run `git config --global safe.bareRepository explicit`"
	default:
		ck.Status, ck.Detail = "warn", "could not read your global git config: "+err.Error()+"; set `git config --global safe.bareRepository explicit`"
	}
	return ck
}
