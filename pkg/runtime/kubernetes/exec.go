package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	kexec "k8s.io/client-go/util/exec"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// Exec runs cmd in the pod's agent container through the API server's
// exec subresource (WebSocket, falling back to SPDY for an older server)
// and returns its exit code. Kubernetes runs it as the container's user:
// opts.User must be "" or that user. WorkingDir and Env, which the API
// has no field for, are applied by /bin/sh in the container (cd, env).
// ctx ending closes the stream (the command may keep running).
// With TTY, the terminal's size (opts.Size, then opts.Resize) reaches the
// command just after it starts: the exec API has no initial size, so what
// it prints at once may be laid out for 0x0, as with Docker engines before
// API 1.42.
func (k *Kube) Exec(ctx context.Context, id string, cmd []string, opts runtime.ExecOptions) (int, error) {
	return k.exec(ctx, id, cmd, execOptions{ExecOptions: opts})
}

// execOptions are Exec's options and the watchdog's own switch.
type execOptions struct {
	runtime.ExecOptions
	noWatchdog bool // the watchdog's own probe
}

func (k *Kube) exec(ctx context.Context, id string, cmd []string, opts execOptions) (int, error) {
	if len(cmd) == 0 {
		return -1, fmt.Errorf("exec in pod %s: no command", id)
	}
	p, err := k.get(ctx, id)
	if err != nil {
		return -1, err
	}
	if opts.User != "" {
		sc := p.Spec.SecurityContext
		want := ""
		if sc != nil && sc.RunAsUser != nil {
			want = strconv.FormatInt(*sc.RunAsUser, 10)
			if sc.RunAsGroup != nil {
				want += ":" + strconv.FormatInt(*sc.RunAsGroup, 10)
			}
		}
		if opts.User != want && (sc == nil || sc.RunAsUser == nil || opts.User != strconv.FormatInt(*sc.RunAsUser, 10)) {
			return -1, fmt.Errorf("exec in pod %s as %s: Kubernetes runs commands only as the pod's user (%s)", id, opts.User, want)
		}
	}
	if opts.WorkingDir != "" || len(opts.Env) > 0 {
		dir := opts.WorkingDir
		if dir == "" {
			dir = "."
		}
		// sh's own cd and export: the image need have no env(1).
		wrapped := []string{"/bin/sh", "-c", `cd "$0" || exit 126; n=$1; shift; while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n-1)); done; exec "$@"`,
			dir, strconv.Itoa(len(opts.Env))}
		wrapped = append(wrapped, opts.Env...)
		cmd = append(wrapped, cmd...)
	}
	req := k.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(k.ns).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: ContainerName,
			Command:   cmd,
			Stdin:     opts.Stdin != nil,
			Stdout:    true,
			Stderr:    !opts.TTY,
			TTY:       opts.TTY,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(k.rc, http.MethodGet, req.URL().String())
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(k.rc, http.MethodPost, req.URL())
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, err)
	}
	// The streams are copied by goroutines of their own: one lock keeps
	// the caller's writers called one at a time, as Docker's demux does
	// (callers pass one buffer for both).
	var mu sync.Mutex
	so := remotecommand.StreamOptions{Stdin: opts.Stdin, Stdout: lockedWriter{&mu, opts.Stdout}, Stderr: lockedWriter{&mu, opts.Stderr}, Tty: opts.TTY}
	if opts.TTY {
		so.Stderr = nil
		fin := make(chan struct{})
		defer close(fin)
		q := &sizeQueue{first: opts.Size, sizes: opts.Resize, done: fin}
		so.TerminalSizeQueue = q
	}
	// The watchdog: a command that has said nothing within the engine
	// timeout may never have started (the pod's shim wedged: the kubelet
	// and the node's container runtime wait on it for ever, and the API
	// has no call that says whether an exec started). A second, empty
	// command then tells: if it does not end within a short look either,
	// the pod is wedged, the stall is recorded and the command given up.
	var (
		heard atomic.Bool
		stuck atomic.Bool
	)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if k.engineTimeout > 0 && !opts.noWatchdog {
		so.Stdout = heardWriter{so.Stdout, &heard}
		if so.Stderr != nil { // nil with a terminal
			so.Stderr = heardWriter{so.Stderr, &heard}
		}
		wd := time.AfterFunc(k.engineTimeout, func() {
			if !heard.Load() && k.execStuck(sctx, id) {
				stuck.Store(true)
				cancel()
			}
		})
		defer wd.Stop()
	}
	err = ex.StreamWithContext(sctx, so)
	switch {
	case stuck.Load():
		return -1, fmt.Errorf("exec in pod %s: %w: the command said nothing within %v and the pod did not run an empty one either (the node's container runtime may be wedged on it)",
			id, runtime.ErrEngineTimeout, k.engineTimeout)
	case err == nil:
		return 0, nil
	}
	var ee kexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), nil
	}
	if ctx.Err() != nil {
		return -1, fmt.Errorf("exec in pod %s: %w", id, ctx.Err())
	}
	return -1, k.wrap("exec in pod", id, err)
}

// execProbeTimeout bounds the watchdog's empty command.
const execProbeTimeout = 10 * time.Second

// execStuck runs an empty command in pod id: it reports whether the pod
// did not run it within execProbeTimeout (and records the stall).
func (k *Kube) execStuck(ctx context.Context, id string) bool {
	pctx, cancel := context.WithTimeout(ctx, execProbeTimeout)
	defer cancel()
	_, err := k.exec(pctx, id, []string{"/bin/sh", "-c", ":"}, execOptions{noWatchdog: true})
	if ctx.Err() != nil || err == nil || !errors.Is(pctx.Err(), context.DeadlineExceeded) {
		return false // the caller gave up itself, or the pod answered
	}
	k.stall("exec start", id, k.engineTimeout)
	return true
}

// stall records that ohd gave up on op on pod id after timeout.
func (k *Kube) stall(op, id string, timeout time.Duration) runtime.Stall {
	return k.stalls.Record(k.log, "kubernetes runtime", runtime.Stall{Op: op, Container: id, Kind: "pod", Timeout: timeout})
}

// Stalls returns the calls on pods ohd gave up on, oldest first.
func (k *Kube) Stalls() []runtime.Stall { return k.stalls.All() }

var _ runtime.StallReporter = (*Kube)(nil)

// heardWriter notes that the command wrote something.
type heardWriter struct {
	w     io.Writer
	heard *atomic.Bool
}

func (h heardWriter) Write(p []byte) (int, error) {
	h.heard.Store(true)
	if h.w == nil {
		return len(p), nil
	}
	return h.w.Write(p)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	if l.w == nil {
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// sizeQueue hands the exec's terminal its first size, then each resize,
// until the caller's channel closes or the exec ends.
type sizeQueue struct {
	first runtime.TermSize
	sent  bool
	sizes <-chan runtime.TermSize
	done  <-chan struct{}
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if !q.sent {
		q.sent = true
		if q.first.Rows > 0 && q.first.Cols > 0 {
			return &remotecommand.TerminalSize{Width: q.first.Cols, Height: q.first.Rows}
		}
	}
	if q.sizes == nil {
		<-q.done
		return nil
	}
	for {
		select {
		case <-q.done:
			return nil
		case s, ok := <-q.sizes:
			if !ok {
				return nil
			}
			if s.Rows > 0 && s.Cols > 0 {
				return &remotecommand.TerminalSize{Width: s.Cols, Height: s.Rows}
			}
		}
	}
}
