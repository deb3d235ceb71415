package runtime

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"
)

// LabelRole marks a container that is not a conversation's inner server.
// Its one value, RoleSandbox, is a short-lived container ohd runs git in
// for a conversation whose own container is stopped (see
// pkg/worktree.Sandbox). Reconcile treats it as an extra container of the
// conversation: it is removed.
const (
	LabelRole   = reservedLabelPrefix + "role"
	RoleSandbox = "sandbox"
)

// SandboxName is the name of conversationID's sandbox container.
func SandboxName(conversationID string) string { return ContainerName(conversationID) + "-sandbox" }

// StartSandbox creates and starts a container from s that reaches nothing:
// no network at all (not even loopback to the host's engine), no published
// port, the same user, mounts, limits and hardening as the conversation's
// own container, labelled as its sandbox. It runs s.Entrypoint and s.Cmd
// (a command that waits, such as `ohctl view idle`); there is no
// readiness check. The caller runs commands in it with Exec and removes it
// with Remove. A leftover sandbox of the same conversation (a crash
// mid-removal) is removed first.
func (d *Docker) StartSandbox(ctx context.Context, s Spec) (string, error) {
	s, err := d.prepare(s)
	name := SandboxName(s.ConversationID)
	if err != nil {
		return "", fmt.Errorf("start sandbox %s: %w", name, err)
	}
	cfg, hc := d.containerConfig(s)
	cfg.Labels[LabelRole] = RoleSandbox
	delete(cfg.Labels, LabelInnerPort)
	cfg.ExposedPorts = nil
	hc.PortBindings = nil
	hc.NetworkMode = "none"
	hc.ExtraHosts = nil
	if old, err := d.Inspect(ctx, name); err == nil {
		if rerr := d.Remove(ctx, old.ID); rerr != nil {
			return "", fmt.Errorf("start sandbox %s: remove the leftover: %w", name, rerr)
		}
	}
	res, err := d.api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		return "", &StartError{Step: StepCreate, Name: name, Err: d.createError(s.Image, err)}
	}
	if _, err := d.api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		_ = d.Remove(context.WithoutCancel(ctx), res.ID)
		return "", &StartError{Step: StepStart, Name: name, Err: d.wrap("start sandbox", name, err)}
	}
	return res.ID, nil
}

// StartSandbox has no container to start.
func (Local) StartSandbox(context.Context, Spec) (string, error) {
	return "", fmt.Errorf("start sandbox: %w", ErrNoContainer)
}
