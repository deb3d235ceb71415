package integration

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/enginepull"
	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The engine's pull stream for a two-layer image (as Docker 20.10 writes
// it), cut into the steps the test waits between.
var (
	pullStart = []string{
		`{"status":"Pulling from ohd/agent","id":"v1"}`,
		`{"status":"Pulling fs layer","progressDetail":{},"id":"a2318d6c47ec"}`,
		`{"status":"Pulling fs layer","progressDetail":{},"id":"5d4f2e9a1b7c"}`,
		`{"status":"Waiting","progressDetail":{},"id":"5d4f2e9a1b7c"}`,
		`{"status":"Downloading","progressDetail":{"current":1048576,"total":4194304},"progress":"[============\u003e                                      ]  1.049MB/4.194MB","id":"a2318d6c47ec"}`,
	}
	pullFirstLayer = []string{
		`{"status":"Downloading","progressDetail":{"current":4194304,"total":4194304},"progress":"[==================================================\u003e]  4.194MB/4.194MB","id":"a2318d6c47ec"}`,
		`{"status":"Verifying Checksum","progressDetail":{},"id":"a2318d6c47ec"}`,
		`{"status":"Download complete","progressDetail":{},"id":"a2318d6c47ec"}`,
		`{"status":"Extracting","progressDetail":{"current":4194304,"total":4194304},"progress":"[==================================================\u003e]  4.194MB/4.194MB","id":"a2318d6c47ec"}`,
		`{"status":"Pull complete","progressDetail":{},"id":"a2318d6c47ec"}`,
		`{"status":"Downloading","progressDetail":{"current":524288,"total":2097152},"progress":"[============\u003e                                      ]  524.3kB/2.097MB","id":"5d4f2e9a1b7c"}`,
	}
	pullSecondLayer = []string{
		`{"status":"Downloading","progressDetail":{"current":2097152,"total":2097152},"progress":"[==================================================\u003e]  2.097MB/2.097MB","id":"5d4f2e9a1b7c"}`,
		`{"status":"Download complete","progressDetail":{},"id":"5d4f2e9a1b7c"}`,
		`{"status":"Pull complete","progressDetail":{},"id":"5d4f2e9a1b7c"}`,
		`{"status":"Digest: sha256:0f4ba3d1b1e5a1e3c0d1c6f8f7a8e2b9d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9"}`,
	}
)

// ohctlRun is an ohctl run the test watches while it waits.
type ohctlRun struct {
	cmd            *exec.Cmd
	stdout, stderr testenv.SyncBuffer
	done           chan struct{} // closed when it has exited, with err set
	err            error
}

func (d *daemon) ohctlBackground(args ...string) *ohctlRun {
	d.t.Helper()
	b := &ohctlRun{done: make(chan struct{})}
	b.cmd = exec.Command(built.ohctl, append([]string{"--socket", d.socket}, args...)...)
	b.cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() {
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	d.t.Cleanup(func() {
		_ = b.cmd.Process.Kill() // an error: it has exited
		<-b.done
	})
	return b
}

// waitStderr waits until the run's standard error holds s; the run must
// still be waiting (a pull it shows has not ended).
func (b *ohctlRun) waitStderr(t *testing.T, s string) {
	t.Helper()
	waitFor(t, 60*time.Second, "ohctl to print "+s, func() bool {
		select {
		case <-b.done:
			t.Fatalf("ohctl exited (%v) before printing %q; stderr:\n%s", b.err, s, b.stderr.String())
		default:
		}
		return strings.Contains(b.stderr.String(), s)
	})
}

func (b *ohctlRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-b.done:
		return b.err
	case <-time.After(3 * time.Minute):
		t.Fatalf("ohctl did not exit; stderr:\n%s", b.stderr.String())
		return nil
	}
}

// TestDockerPullProgressInOhctl runs ohd against an engine (the real one,
// behind enginepull) whose registry is the test: ohctl create, waiting
// for the pull of a missing image, shows each step of the engine's pull
// stream while the create still waits; the conversation then records the
// pulled image. A second create whose pull fails (a mirror with a
// password in its URL that does not answer) fails naming the image and
// how to pull or load it, and the password reaches neither ohctl nor the
// log.
func TestDockerPullProgressInOhctl(t *testing.T) {
	// Docker only by design: it shows Docker's pull stream; on Kubernetes ohd runs the node's images and pulls nothing unless --kube-pull-images, and then the kubelet pulls.
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	proxy := enginepull.Start(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	ref := "ohd-pull-test.invalid/ohd/agent:" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() { _ = dockerCmd("image", "rm", ref).Run() })
	d := startDaemon(t, daemonOptions{Runtime: "docker", Env: []string{"DOCKER_HOST=" + proxy.Host},
		Args: []string{"--image", ref, "--memory", "268435456", "--ready-timeout", "60s"}})
	t.Cleanup(func() { removeServerContainers(t, d) })
	repo := testenv.NewRepo(t, testenv.RepoOptions{})

	create := d.ohctlBackground("create", "--repo", repo, "--worktree")
	var pull *enginepull.Pull
	select {
	case pull = <-proxy.Pulls:
	case <-time.After(60 * time.Second):
		t.Fatalf("ohd asked the engine for no pull; ohctl stderr:\n%s\nohd log:\n%s", create.stderr.String(), tail(d.logs.String(), 20))
	}
	if pull.Image != ref {
		t.Errorf("ohd pulled %q, want %q", pull.Image, ref)
	}
	if a := pull.Header.Get("X-Registry-Auth"); a != "" {
		t.Errorf("ohd sent registry credentials with the pull (%d bytes)", len(a))
	}
	line := "ohctl: pulling " + ref + ": "
	pull.Send(pullStart...)
	create.waitStderr(t, "ohctl: the Docker engine does not have image "+ref+": ohd is pulling it, the create waits\n"+line+"0 of 2 layers done, 1.0 MiB of 4.0 MiB downloaded [Pulling from ohd/agent]\n")
	pull.Send(pullFirstLayer...)
	create.waitStderr(t, line+"1 of 2 layers done, 4.5 MiB of 6.0 MiB downloaded [Pulling from ohd/agent]\n")

	// What a real pull leaves behind: the reference in the engine.
	if out, err := dockerCmd("tag", img, ref).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, out)
	}
	pull.Send(pullSecondLayer...)
	pull.Send(`{"status":"Status: Downloaded newer image for ` + ref + `"}`)
	pull.Close()
	if err := create.wait(t); err != nil {
		t.Fatalf("ohctl create after the pull: %v\n%s\nohd log:\n%s", err, create.stderr.String(), tail(d.logs.String(), 30))
	}
	t.Logf("ohctl create's standard error:\n%s", create.stderr.String())
	var convs []store.Conversation
	d.ohctlJSON(&convs, "ls")
	wantID, err := dockerCmd("image", "inspect", "--format", "{{.Id}}", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(convs) != 1 || convs[0].Image != ref || convs[0].ImageID != strings.TrimSpace(string(wantID)) || convs[0].State != store.StateRunning {
		t.Fatalf("after the pulled create: %+v, want one running conversation of %s (%s)", convs, ref, wantID)
	}
	if !strings.Contains(create.stdout.String(), convs[0].ID) {
		t.Errorf("ohctl create's output does not show the conversation:\n%s", create.stdout.String())
	}
	for _, s := range []string{`"msg":"pulling image"`, `"layer":"a2318d6c47ec"`, `"status":"Pull complete"`, `"msg":"pulled image"`} {
		if !strings.Contains(d.logs.String(), s) {
			t.Errorf("ohd's log has no %s", s)
		}
	}

	// The image gone again, and the engine's mirror down.
	if out, err := dockerCmd("image", "rm", ref).CombinedOutput(); err != nil {
		t.Fatalf("docker image rm: %v: %s", err, out)
	}
	failed := d.ohctlBackground("create", "--repo", repo, "--worktree")
	select {
	case pull = <-proxy.Pulls:
	case <-time.After(60 * time.Second):
		t.Fatalf("the second create asked for no pull; ohctl stderr:\n%s", failed.stderr.String())
	}
	pull.Send(pullStart...)
	failed.waitStderr(t, line+"0 of 2 layers done")
	pull.Send(`{"errorDetail":{"message":"Get \"https://ohd-mirror:s3cret-mirror-pass@mirror.invalid/v2/ohd/agent/manifests/v1\": dial tcp: lookup mirror.invalid: no such host"},"error":"Get \"https://ohd-mirror:s3cret-mirror-pass@mirror.invalid/v2/ohd/agent/manifests/v1\": dial tcp: lookup mirror.invalid: no such host"}`)
	pull.Close()
	err = failed.wait(t)
	msg := failed.stderr.String()
	t.Logf("ohctl create's standard error, the pull failing:\n%s", msg)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("ohctl create with a failed pull: %v, want exit 1", err)
	}
	for _, want := range []string{`"` + ref + `"`, "docker pull " + ref, "docker load -i", "--image", "no such host"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ohctl create's message after a failed pull has no %q:\n%s", want, msg)
		}
	}
	for what, s := range map[string]string{"ohctl's output": msg + failed.stdout.String(), "ohd's log": d.logs.String()} {
		if strings.Contains(s, "s3cret") {
			t.Errorf("%s carries the mirror's password:\n%s", what, s)
		}
	}
	d.ohctlJSON(&convs, "ls")
	if len(convs) != 1 {
		t.Errorf("a create whose pull failed left a conversation: %+v", convs)
	}
}
