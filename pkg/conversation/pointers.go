package conversation

import (
	"context"
	"fmt"
	"strings"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// checkPointers is doctor's check that c's running container has every
// workspace mount of today's plan (worktree/mountplan: the .git files,
// submodule directories and the directories above them that the user's
// git follows, fixed). A container keeps the mounts it was made with: a
// submodule the user checked out since is fixed in it live by the
// publisher (livepins.go), or, where that cannot be done, when it is made
// anew, which its next start does (doStart).
func (m *Manager) checkPointers(ctx context.Context, c store.Conversation) control.DoctorCheck {
	ck := control.DoctorCheck{Conversation: c.ID, Check: "fixed-pointers", Status: "fail"}
	want, err := m.workspaceMounts(c)
	if err != nil {
		ck.Detail = "the container's mount plan: " + err.Error()
		return ck
	}
	ins, err := m.rt.Inspect(ctx, c.ContainerID)
	if err != nil {
		ck.Detail = err.Error()
		return ck
	}
	var lacking []runtime.Mount
	switch {
	case ins.PID != 0 && canReadMounts(ins.PID):
		// What its namespace has, live pins included (livepins.go).
		points, err := mountPoints(ins.PID)
		if err != nil {
			ck.Detail = err.Error()
			return ck
		}
		lacking = lackingMounts(want, points)
	case ins.Mounts == nil:
		ck.Status, ck.Detail = "ok", "the runtime does not say which mounts the container has"
		return ck
	default:
		have := map[runtime.Mount]bool{}
		for _, mt := range ins.Mounts {
			have[mt] = true
		}
		for _, mt := range want {
			if !have[mt] {
				lacking = append(lacking, mt)
			}
		}
	}
	var missing []string
	for _, mt := range lacking {
		mode := "read-write"
		if mt.ReadOnly {
			mode = "read-only"
		}
		missing = append(missing, mt.Target+" ("+mode+")")
	}
	if len(missing) == 0 {
		ck.Status, ck.Detail = "ok", fmt.Sprintf("the container has all %d workspace mounts of today's plan: every .git, submodule directory and directory above them that the user's git follows is fixed", len(want))
		return ck
	}
	shown := missing
	if len(shown) > 5 {
		shown = shown[:5]
	}
	stop := "stop it (docker stop " + c.ContainerName + ")"
	if c.Runtime == "kubernetes" {
		stop = "delete its pod (kubectl delete pod " + c.ContainerName + " in ohd's namespace)"
	}
	ck.Detail = fmt.Sprintf("the container lacks %d mounts of today's plan (%s): it was made before them (a submodule checked out since, or an earlier version of ohd), so the agent can still move or fill what the user's git would enter there; it is made anew with them when it next starts: %s and the next request starts it",
		len(missing), strings.Join(shown, ", "), stop)
	return ck
}
