package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// exitedError is the cause of the ready context when the container
// stopped running.
type exitedError struct{ code int64 }

func (e *exitedError) Error() string {
	return fmt.Sprintf("the container exited with code %d before it was ready", e.code)
}

func (e *exitedError) Unwrap() error { return ErrExited }

// Backoff of the health check polls: quick at first (a small server is up
// in milliseconds), then at most every 250ms.
const (
	readyFirstDelay = 10 * time.Millisecond
	readyMaxDelay   = 250 * time.Millisecond
	readyAttempt    = 2 * time.Second // bound of one GET
)

// waitReady polls GET http://addr<HealthPath> until it answers 200, while
// watching the container: if it stops running first, waitReady returns an
// error wrapping ErrExited at once; after s.ReadyTimeout, one wrapping
// ErrNotReady.
//
// With inNetns (a container without network), the polls connect inside
// the container's network namespace.
func (d *Docker) waitReady(ctx context.Context, id, addr string, s Spec, inNetns bool) error {
	readyCtx, cancelReady := context.WithTimeout(ctx, s.ReadyTimeout)
	defer cancelReady()
	hc := d.httpc
	if inNetns {
		nd, err := d.OpenNetns(readyCtx, id)
		if err != nil {
			// A container whose process exited at once (an image that
			// refuses ohd's arguments) has no namespace left to enter:
			// that is its exit, which the caller explains with its
			// output, not a failure to reach it.
			if ex := d.exitedSoon(readyCtx, id, exitSettle); ex != nil {
				return ex
			}
			return fmt.Errorf("reach the inner server of a container without network: %w", err)
		}
		defer nd.Close()
		hc = &http.Client{Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return nd.DialContext(ctx) },
			DisableKeepAlives: true,
		}}
	}
	watchCtx, stopWatch := context.WithCancelCause(readyCtx)

	// The watcher ends the polls as soon as the container stops running.
	// It always receives exactly one of Result and Error (the client sends
	// one of them), so the client's goroutine ends too; this function waits
	// for the watcher before returning.
	wait := d.api.ContainerWait(readyCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	watching := make(chan struct{})
	lostWatch := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case r := <-wait.Result:
			stopWatch(&exitedError{code: r.StatusCode})
		case err := <-wait.Error:
			if readyCtx.Err() == nil {
				d.log.Warn("docker runtime: lost the wait on a starting container; polling its state instead",
					"id", shortID(id), "err", err)
				close(lostWatch)
			}
		}
	}()
	defer func() {
		cancelReady()
		<-watching
	}()

	url := "http://" + addr + s.HealthPath
	delay := readyFirstDelay
	var last error
	for {
		ok, err := d.healthy(watchCtx, hc, url)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-lostWatch:
			if err := d.checkRunning(watchCtx, id); err != nil {
				stopWatch(err)
			}
		default:
		}
		t := time.NewTimer(delay)
		select {
		case <-watchCtx.Done():
			t.Stop()
			return readyFailure(ctx, watchCtx, s, url, last)
		case <-t.C:
		}
		delay = min(delay*2, readyMaxDelay)
	}
}

// readyFailure explains why the wait ended without a 200.
func readyFailure(ctx, watchCtx context.Context, s Spec, url string, last error) error {
	cause := context.Cause(watchCtx)
	var ex *exitedError
	switch {
	case errors.As(cause, &ex):
		return ex
	case errors.Is(cause, ErrExited):
		return cause
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
	}
	msg := fmt.Sprintf("%s did not answer 200 within %v", s.HealthPath, s.ReadyTimeout)
	if last != nil {
		msg += fmt.Sprintf(" (last attempt: %v)", last)
	}
	return fmt.Errorf("%w: %s", ErrNotReady, msg)
}

// healthy makes one GET; it reports whether it answered 200, or why not.
func (d *Docker) healthy(ctx context.Context, hc *http.Client, url string) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, readyAttempt)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status %s", resp.Status)
	}
	return true, nil
}

// exitSettle bounds how long exitedSoon waits for the engine to record
// the exit of a container whose process is already gone.
const exitSettle = 2 * time.Second

// exitedSoon returns checkRunning's error once the engine says the
// container no longer runs, polling for at most within; nil if it still
// runs then.
func (d *Docker) exitedSoon(ctx context.Context, id string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		if err := d.checkRunning(ctx, id); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkRunning returns an error wrapping ErrExited if the container no
// longer runs.
func (d *Docker) checkRunning(ctx context.Context, id string) error {
	res, err := d.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if ctx.Err() == nil && cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: the container was removed", ErrExited)
		}
		return nil
	}
	if st := res.Container.State; st != nil && !st.Running {
		return &exitedError{code: int64(st.ExitCode)}
	}
	return nil
}

// demux splits the engine's multiplexed stream (a container without a
// TTY) into stdout and stderr; nil writers discard.
func demux(stdout, stderr io.Writer, r io.Reader) error {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	_, err := stdcopy.StdCopy(stdout, stderr, r)
	return err
}
