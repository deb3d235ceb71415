package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/moby/client"
)

// Hardening inspects a running container and lists every way it departs
// from ohd's hardening: the expected user (uid:gid, the agent's own), all capabilities dropped,
// no-new-privileges, no privileged mode or host namespaces, memory, CPU
// and pids limits, and its ports published on 127.0.0.1 only. An empty
// list means the container is hardened as ohd created it.
func (d *Docker) Hardening(ctx context.Context, id string, uid, gid int) ([]string, error) {
	res, err := d.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, d.wrap("inspect container", shortID(id), err)
	}
	ci := res.Container
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if ci.Config == nil || ci.HostConfig == nil {
		return []string{"the engine returned no configuration"}, nil
	}
	if want := fmt.Sprintf("%d:%d", uid, gid); ci.Config.User != want {
		bad("runs as %q, not the agent's user %s", ci.Config.User, want)
	}
	hc := ci.HostConfig
	if !slices.ContainsFunc(hc.CapDrop, func(c string) bool { return strings.EqualFold(c, "ALL") }) {
		bad("capabilities not all dropped (CapDrop %v)", hc.CapDrop)
	}
	if len(hc.CapAdd) > 0 {
		bad("capabilities added: %v", hc.CapAdd)
	}
	if !slices.ContainsFunc(hc.SecurityOpt, func(o string) bool {
		return strings.HasPrefix(o, "no-new-privileges") && !strings.HasSuffix(o, "false")
	}) {
		bad("no-new-privileges not set")
	}
	if hc.Privileged {
		bad("privileged")
	}
	for what, mode := range map[string]string{"network": string(hc.NetworkMode), "pid": string(hc.PidMode), "ipc": string(hc.IpcMode), "uts": string(hc.UTSMode)} {
		if mode == "host" {
			bad("shares the host's %s namespace", what)
		}
	}
	if hc.Memory <= 0 {
		bad("no memory limit")
	}
	if hc.NanoCPUs <= 0 && hc.CPUQuota <= 0 {
		bad("no CPU limit")
	}
	if hc.PidsLimit == nil || *hc.PidsLimit <= 0 {
		bad("no pids limit")
	}
	for port, bindings := range hc.PortBindings {
		for _, b := range bindings {
			if b.HostIP.String() != "127.0.0.1" {
				bad("port %s published on %q, not 127.0.0.1", port, b.HostIP)
			}
		}
	}
	return problems, nil
}

// Hardening of the local runtime has nothing to inspect.
func (Local) Hardening(context.Context, string, int, int) ([]string, error) { return nil, nil }
