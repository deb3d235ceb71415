package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
)

// DefaultEngineTimeout bounds each call to the engine when
// DockerOptions.EngineTimeout is 0.
const DefaultEngineTimeout = time.Minute

// Stall is an engine call that got no answer within its deadline: the
// engine may be wedged on that container (a frozen exec, a stuck shim).
// ohd gave up on the call; what it was doing is retried or reported.
type Stall struct {
	// Op is the engine call ("exec start", "inspect", "remove", ...).
	Op string `json:"op"`
	// Container is the container's ID or name ("" for calls on none); on
	// Kubernetes, the pod's "<name>/<uid>" (Kind "pod").
	Container string `json:"container,omitempty"`
	// Kind is what Container names: "" for a container, "pod".
	Kind string `json:"kind,omitempty"`
	// At is when ohd gave up.
	At time.Time `json:"at"`
	// Timeout is the deadline the call had.
	Timeout time.Duration `json:"timeout"`
}

// String reads "engine call inspect on container 1234abcd timed out at
// 2026-12-06T20:01:02Z (no answer within 1m0s)", or "... on pod
// ohd-1234abcd ..." for a pod.
func (s Stall) String() string {
	on := ""
	switch {
	case s.Container == "":
	case s.Kind == "pod":
		name, _, _ := strings.Cut(s.Container, "/")
		on = " on pod " + name
	default:
		on = " on container " + shortID(s.Container)
	}
	return fmt.Sprintf("engine call %s%s timed out at %s (no answer within %v)", s.Op, on, s.At.UTC().Format(time.RFC3339), s.Timeout)
}

// StallReporter is a Runtime that records the engine calls it gave up on
// (Docker, Kubernetes). ohctl show and ohctl doctor list them.
type StallReporter interface {
	// Stalls returns the recent stalls, oldest first (at most 100).
	Stalls() []Stall
}

// StallLog keeps the last 100 stalls of a runtime; its zero value is
// ready. It is safe for concurrent use.
type StallLog struct {
	mu   sync.Mutex
	list []Stall
}

const maxStalls = 100

// Add records st.
func (s *StallLog) Add(st Stall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, st)
	if len(s.list) > maxStalls {
		s.list = slices.Delete(s.list, 0, len(s.list)-maxStalls)
	}
}

// Record stamps st with the time, adds it, and logs it as a warning of
// the runtime named who ("docker runtime"); it returns st as recorded.
func (s *StallLog) Record(log *slog.Logger, who string, st Stall) Stall {
	st.At = time.Now().UTC()
	s.Add(st)
	log.Warn(who+": "+st.String()+"; ohd gave up on it", "op", st.Op, "container", st.Container, "timeout", st.Timeout)
	return st
}

// All returns the stalls recorded, oldest first.
func (s *StallLog) All() []Stall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// Stalls returns the engine calls the runtime gave up on, oldest first.
func (d *Docker) Stalls() []Stall { return d.stalls.All() }

var _ StallReporter = (*Docker)(nil)

// bounded is the engine with a deadline on every call that answers once
// (not the streams: events, logs, pulls, archives and the exec's
// hijacked connection, whose callers bound them; see Docker.Exec's
// watchdog). A call that outlives its deadline is logged and recorded
// (stalls) and fails with ErrEngineTimeout.
type bounded struct {
	engine
	timeout time.Duration
	stalls  *StallLog
	log     *slog.Logger
}

// call runs fn with ctx bounded by timeout and reports a stall.
func (b *bounded) call(ctx context.Context, op, obj string, timeout time.Duration, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := fn(cctx)
	if err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		b.stall(op, obj, timeout)
		return fmt.Errorf("%w: %s: %w", ErrEngineTimeout, Stall{Op: op, Container: obj, At: time.Now(), Timeout: timeout}, err)
	}
	return err
}

func (b *bounded) stall(op, obj string, timeout time.Duration) {
	b.stalls.Record(b.log, "docker runtime", Stall{Op: op, Container: obj, Timeout: timeout})
}

func (b *bounded) Ping(ctx context.Context, o client.PingOptions) (r client.PingResult, err error) {
	err = b.call(ctx, "ping", "", b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.Ping(ctx, o); return })
	return
}

func (b *bounded) Info(ctx context.Context, o client.InfoOptions) (r client.SystemInfoResult, err error) {
	err = b.call(ctx, "info", "", b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.Info(ctx, o); return })
	return
}

func (b *bounded) ImageInspect(ctx context.Context, ref string, o ...client.ImageInspectOption) (r client.ImageInspectResult, err error) {
	err = b.call(ctx, "image inspect", "", b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ImageInspect(ctx, ref, o...); return })
	return
}

func (b *bounded) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (r client.ContainerCreateResult, err error) {
	err = b.call(ctx, "create", o.Name, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerCreate(ctx, o); return })
	return
}

func (b *bounded) ContainerStart(ctx context.Context, id string, o client.ContainerStartOptions) (r client.ContainerStartResult, err error) {
	err = b.call(ctx, "start", id, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerStart(ctx, id, o); return })
	return
}

func (b *bounded) ContainerStop(ctx context.Context, id string, o client.ContainerStopOptions) (r client.ContainerStopResult, err error) {
	// The engine waits the grace period before it kills.
	t := b.timeout
	if o.Timeout != nil && *o.Timeout > 0 {
		t += time.Duration(*o.Timeout) * time.Second
	}
	err = b.call(ctx, "stop", id, t, func(ctx context.Context) (e error) { r, e = b.engine.ContainerStop(ctx, id, o); return })
	return
}

func (b *bounded) ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (r client.ContainerRemoveResult, err error) {
	err = b.call(ctx, "remove", id, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerRemove(ctx, id, o); return })
	return
}

func (b *bounded) ContainerPause(ctx context.Context, id string, o client.ContainerPauseOptions) (r client.ContainerPauseResult, err error) {
	err = b.call(ctx, "pause", id, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerPause(ctx, id, o); return })
	return
}

func (b *bounded) ContainerUnpause(ctx context.Context, id string, o client.ContainerUnpauseOptions) (r client.ContainerUnpauseResult, err error) {
	err = b.call(ctx, "unpause", id, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerUnpause(ctx, id, o); return })
	return
}

func (b *bounded) ContainerInspect(ctx context.Context, id string, o client.ContainerInspectOptions) (r client.ContainerInspectResult, err error) {
	err = b.call(ctx, "inspect", id, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerInspect(ctx, id, o); return })
	return
}

func (b *bounded) ContainerList(ctx context.Context, o client.ContainerListOptions) (r client.ContainerListResult, err error) {
	err = b.call(ctx, "list", "", b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ContainerList(ctx, o); return })
	return
}

func (b *bounded) ExecCreate(ctx context.Context, id string, o client.ExecCreateOptions) (r client.ExecCreateResult, err error) {
	err = b.call(ctx, "exec create", id, b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ExecCreate(ctx, id, o); return })
	return
}

// execContainer carries, on an exec's context, the container the exec
// runs in: the engine's exec calls name only the exec, and a stall must
// name the container.
type execContainer struct{}

func withExecContainer(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, execContainer{}, id)
}

func execContainerOf(ctx context.Context) string {
	id, _ := ctx.Value(execContainer{}).(string)
	return id
}

// ExecAttach is bounded until the connection is hijacked; the
// connection itself is not tied to the context (see Docker.Exec).
func (b *bounded) ExecAttach(ctx context.Context, execID string, o client.ExecAttachOptions) (r client.ExecAttachResult, err error) {
	err = b.call(ctx, "exec start", execContainerOf(ctx), b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ExecAttach(ctx, execID, o); return })
	return
}

func (b *bounded) ExecInspect(ctx context.Context, execID string, o client.ExecInspectOptions) (r client.ExecInspectResult, err error) {
	err = b.call(ctx, "exec inspect", execContainerOf(ctx), b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ExecInspect(ctx, execID, o); return })
	return
}

func (b *bounded) ExecResize(ctx context.Context, execID string, o client.ExecResizeOptions) (r client.ExecResizeResult, err error) {
	err = b.call(ctx, "exec resize", execContainerOf(ctx), b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.ExecResize(ctx, execID, o); return })
	return
}

func (b *bounded) NetworkInspect(ctx context.Context, id string, o client.NetworkInspectOptions) (r client.NetworkInspectResult, err error) {
	err = b.call(ctx, "network inspect", "", b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.NetworkInspect(ctx, id, o); return })
	return
}

func (b *bounded) NetworkCreate(ctx context.Context, name string, o client.NetworkCreateOptions) (r client.NetworkCreateResult, err error) {
	err = b.call(ctx, "network create", "", b.timeout, func(ctx context.Context) (e error) { r, e = b.engine.NetworkCreate(ctx, name, o); return })
	return
}
