package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/enginepull"
	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
)

// A pull stream as Docker 20.10 writes it for a two-layer image, cut into
// the steps the tests wait between.
var (
	pullStart = []string{
		`{"status":"Pulling from ohd/pull-test","id":"v1"}`,
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
	}
	pullSecondLayer = []string{
		`{"status":"Downloading","progressDetail":{"current":2097152,"total":2097152},"progress":"[==================================================\u003e]  2.097MB/2.097MB","id":"5d4f2e9a1b7c"}`,
		`{"status":"Download complete","progressDetail":{},"id":"5d4f2e9a1b7c"}`,
		`{"status":"Pull complete","progressDetail":{},"id":"5d4f2e9a1b7c"}`,
		`{"status":"Digest: sha256:0f4ba3d1b1e5a1e3c0d1c6f8f7a8e2b9d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9"}`,
	}
)

// mirrorFailure is what an engine with a registry mirror configured as
// https://user:password@host says when the mirror does not answer: the
// password must not travel on.
const mirrorFailure = `{"errorDetail":{"message":"Get \"https://ohd-mirror:s3cret-mirror-pass@mirror.invalid/v2/ohd/pull-test/blobs/sha256:5d4f?X-Amz-Signature=deadbeefsig\": dial tcp: lookup mirror.invalid: no such host"},"error":"Get \"https://ohd-mirror:s3cret-mirror-pass@mirror.invalid/v2/ohd/pull-test/blobs/sha256:5d4f?X-Amz-Signature=deadbeefsig\": dial tcp: lookup mirror.invalid: no such host"}`

// pulledRef is a reference no registry serves, untagged when t ends.
func pulledRef(t *testing.T) string {
	t.Helper()
	ref := "ohd-pull-test.invalid/ohd/pull-test:" + strings.ReplaceAll(newUUID(t), "-", "")[:12]
	t.Cleanup(func() { _ = dockerCmd("image", "rm", ref).Run() })
	return ref
}

func waitPull(t *testing.T, p *enginepull.Proxy) *enginepull.Pull {
	t.Helper()
	select {
	case pull := <-p.Pulls:
		return pull
	case <-time.After(60 * time.Second):
		t.Fatal("no pull reached the engine within 60s")
		return nil
	}
}

// waitPulls waits until Pulls satisfies cond and returns what it saw.
func waitPulls(t *testing.T, d *Docker, what string, cond func([]Pull) bool) []Pull {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := d.Pulls()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; Pulls = %+v", what, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPullProgress feeds ResolveImage an engine's pull stream step by step
// and checks Pulls shows each step while the resolve waits, the log has
// the layers, and the image resolves once the pull leaves it behind.
func TestPullProgress(t *testing.T) {
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	proxy := enginepull.Start(t)
	logs := &testenv.SyncBuffer{}
	d, err := NewDocker(context.Background(), DockerOptions{Host: proxy.Host, Logger: slog.New(slog.NewJSONHandler(io.MultiWriter(logs, &tlog{t: t}), nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ref := pulledRef(t)

	type result struct {
		img Image
		err error
	}
	done := make(chan result, 1)
	go func() {
		i, err := d.ResolveImage(context.Background(), ref)
		done <- result{i, err}
	}()
	pull := waitPull(t, proxy)
	if pull.Image != ref {
		t.Errorf("the engine was asked to pull %q, want %q", pull.Image, ref)
	}
	if a := pull.Header.Get("X-Registry-Auth"); a != "" {
		t.Errorf("the pull sent registry credentials (X-Registry-Auth %d bytes): ohd has none to send", len(a))
	}

	pull.Send(pullStart...)
	got := waitPulls(t, d, "the first layer downloading", func(p []Pull) bool {
		return len(p) == 1 && len(p[0].Layers) == 2 && p[0].Layers[0].Downloaded > 0
	})
	want := []PullLayer{
		{ID: "a2318d6c47ec", Status: "Downloading", Downloaded: 1 << 20, Size: 4 << 20},
		{ID: "5d4f2e9a1b7c", Status: "Waiting"},
	}
	if diff := cmp.Diff(want, got[0].Layers); diff != "" || got[0].Image != ref || got[0].Status != "Pulling from ohd/pull-test" {
		t.Errorf("Pulls while downloading = %+v (-want +got layers):\n%s", got, diff)
	}
	select {
	case r := <-done:
		t.Fatalf("ResolveImage returned before the pull ended: %+v, %v", r.img, r.err)
	default:
	}

	pull.Send(pullFirstLayer...)
	got = waitPulls(t, d, "the first layer complete", func(p []Pull) bool {
		return len(p) == 1 && p[0].Layers[0].Done
	})
	if l := got[0].Layers[0]; l.Downloaded != 4<<20 || l.Size != 4<<20 || l.Status != "Pull complete" {
		t.Errorf("first layer after its pull = %+v, want 4 MiB of 4 MiB, Pull complete", l)
	}

	// What a real pull leaves behind: the reference in the engine.
	if out, err := dockerCmd("tag", img, ref).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, out)
	}
	pull.Send(pullSecondLayer...)
	pull.Send(`{"status":"Status: Downloaded newer image for ` + ref + `"}`)
	pull.Close()
	r := <-done
	if r.err != nil {
		t.Fatalf("ResolveImage after the pull: %v", r.err)
	}
	want0, err := d.ResolveImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	if r.img.ID != want0.ID || r.img.Ref != ref {
		t.Errorf("ResolveImage(%s) = %+v, want the pulled image %s", ref, r.img, want0.ID)
	}
	if p := d.Pulls(); len(p) != 0 {
		t.Errorf("Pulls after the pull = %+v, want none", p)
	}
	for _, line := range []string{`"layer":"a2318d6c47ec"`, `"status":"Pull complete"`, `"done_bytes":1048576,"total_bytes":4194304`, `"msg":"pulled image"`} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("the log has no %s:\n%s", line, logs)
		}
	}
}

// TestPullFailureScrubbed fails a pull half way with the error an engine
// gives when its mirror (configured with a password in its URL) does not
// answer: the resolve fails with ErrNotFound naming the image and how to
// load it, and neither the error, Pulls nor the log carries the password
// or the signed URL's query.
func TestPullFailureScrubbed(t *testing.T) {
	testenv.RequireDocker(t)
	proxy := enginepull.Start(t)
	logs := &testenv.SyncBuffer{}
	d, err := NewDocker(context.Background(), DockerOptions{Host: proxy.Host, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ref := pulledRef(t)
	done := make(chan error, 1)
	go func() {
		_, err := d.ResolveImage(context.Background(), ref)
		done <- err
	}()
	pull := waitPull(t, proxy)
	pull.Send(pullStart...)
	waitPulls(t, d, "the pull under way", func(p []Pull) bool { return len(p) == 1 && len(p[0].Layers) == 2 })
	pull.Send(`{"status":"Retrying in 5 seconds: https://ohd-mirror:s3cret-mirror-pass@mirror.invalid/v2/","id":"5d4f2e9a1b7c"}`)
	got := waitPulls(t, d, "the retry status", func(p []Pull) bool {
		return len(p) == 1 && strings.HasPrefix(p[0].Layers[1].Status, "Retrying")
	})
	if s := got[0].Layers[1].Status; strings.Contains(s, "s3cret") || !strings.Contains(s, "[redacted]@mirror.invalid") {
		t.Errorf("layer status = %q, want the mirror's password redacted", s)
	}
	pull.Send(mirrorFailure)
	pull.Close()
	err = <-done
	msg := err.Error()
	if !errors.Is(err, ErrNotFound) || !strings.Contains(msg, `"`+ref+`"`) || !strings.Contains(msg, "docker load -i") ||
		!strings.Contains(msg, "docker pull "+ref) || !strings.Contains(msg, "--image") || !strings.Contains(msg, "no such host") {
		t.Errorf("ResolveImage after a failed pull = %v, want ErrNotFound with the engine's reason, naming the image, docker pull, docker load and --image", err)
	}
	for what, s := range map[string]string{"error": msg, "log": logs.String()} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "deadbeefsig") {
			t.Errorf("the %s carries the mirror's password or the URL's signature:\n%s", what, s)
		}
	}
	if p := d.Pulls(); len(p) != 0 {
		t.Errorf("Pulls after the failed pull = %+v, want none", p)
	}
}

func TestScrubCredentials(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Pulling fs layer", "Pulling fs layer"},
		{"Digest: sha256:0f4b", "Digest: sha256:0f4b"},
		{`Get "https://u:p4ss@mirror.example/v2/": EOF`, `Get "https://[redacted]@mirror.example/v2/": EOF`},
		{`Get "https://token@mirror.example/v2/"`, `Get "https://[redacted]@mirror.example/v2/"`},
		{"https://auth.example/token?scope=repo%3Ax&account=bob&password=hunter2 failed", "https://auth.example/token?[redacted] failed"},
		{"header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "header Authorization: Bearer [redacted]"},
		{"Basic dXNlcjpwYXNzd29yZA==", "Basic [redacted]"},
		{"ghcr.io/openhands/agent-server:1.54.0-python", "ghcr.io/openhands/agent-server:1.54.0-python"},
	} {
		if got := scrubCredentials(tc.in); got != tc.want {
			t.Errorf("scrubCredentials(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
