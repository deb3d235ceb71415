package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/store"
)

// backend is one container runtime the runtime-dependent tests run on:
// how to start ohd on it, and how to look at a conversation's container
// behind ohd's back with the engine's own tools.
type backend struct {
	name string
	// daemon starts ohd on this backend (the test image, 256 MiB
	// containers) with extra flags.
	daemon func(t testing.TB, extra ...string) *daemon
	// running says whether the container ohd recorded (ContainerID) runs.
	running func(t testing.TB, containerID string) bool
	// exists says whether it exists at all.
	exists func(t testing.TB, containerID string) bool
	// kill removes it behind ohd's back.
	kill func(t testing.TB, containerID string)
	// stoppedKeepsContainer: Docker keeps a stopped conversation's
	// container (ohd starts it again); Kubernetes has no stopped pod: ohd
	// deletes it, and resume creates a new one (another container id),
	// the conversation's state staying on the node's disk.
	stoppedKeepsContainer bool
}

// eachBackend runs fn as a subtest per backend: "docker", and
// "kubernetes" against the test cluster of make test-kube (OHD_KUBE=1;
// skipped otherwise, with the reason).
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range []backend{dockerBackend(), kubeBackend()} {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

func dockerBackend() backend {
	return backend{
		name:   "docker",
		daemon: func(t testing.TB, extra ...string) *daemon { return dockerDaemon(t, extra...) },
		running: func(t testing.TB, id string) bool {
			return containerRunning(t.(*testing.T), id)
		},
		exists:                func(_ testing.TB, id string) bool { return containerExists(id) },
		kill:                  func(t testing.TB, id string) { _ = exec.Command("docker", "rm", "-f", id).Run() },
		stoppedKeepsContainer: true,
	}
}

var kubeImage struct {
	sync.Mutex
	loaded map[string]error
}

// requireKube stops t without the test cluster: make test-kube sets
// OHD_KUBE=1 and sources scripts/kube's env; there, nothing skips.
func requireKube(t testing.TB) kubernetes.Interface {
	t.Helper()
	if os.Getenv("OHD_KUBE") != "1" {
		t.Skip("no test cluster: make test-kube runs the Kubernetes backend (OHD_KUBE=1)")
	}
	for _, v := range []string{"KUBECONFIG", "OHD_KUBE_NODE", "OHD_KUBE_NAMESPACE"} {
		if os.Getenv(v) == "" {
			t.Fatalf("OHD_KUBE=1 but %s is empty: source scripts/kube's env (make test-kube does)", v)
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubeTestImage is the test image, loaded into the node's containerd as
// Docker has it now.
func kubeTestImage(t testing.TB) string {
	ref := testimage.Ensure(t)
	kubeImage.Lock()
	defer kubeImage.Unlock()
	if kubeImage.loaded == nil {
		kubeImage.loaded = map[string]error{}
	}
	err, ok := kubeImage.loaded[ref]
	if !ok {
		out, lerr := exec.Command(filepath.Join(moduleRoot(), "scripts/kube/load-image"), ref).CombinedOutput()
		if lerr != nil {
			err = &ohctlError{code: -1, stderr: string(out)}
		}
		kubeImage.loaded[ref] = err
	}
	if err != nil {
		t.Fatalf("load %s into the cluster: %v", ref, err)
	}
	return ref
}

func kubeBackend() backend {
	ns := func() string { return os.Getenv("OHD_KUBE_NAMESPACE") }
	pod := func(t testing.TB, id string) (bool, bool) {
		cs := requireKube(t)
		name, uid, _ := strings.Cut(id, "/")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := cs.CoreV1().Pods(ns()).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, false
		}
		if err != nil {
			t.Fatalf("get pod %s: %v", name, err)
		}
		if string(p.UID) != uid {
			return false, false
		}
		running := false
		for _, s := range p.Status.ContainerStatuses {
			running = running || s.State.Running != nil
		}
		return true, running && p.DeletionTimestamp == nil
	}
	return backend{
		name: "kubernetes",
		daemon: func(t testing.TB, extra ...string) *daemon {
			cs := requireKube(t)
			img := kubeTestImage(t)
			args := append([]string{"--image", img, "--memory", "268435456", "--ready-timeout", "90s",
				"--kubeconfig", os.Getenv("KUBECONFIG"), "--kube-node", os.Getenv("OHD_KUBE_NODE"), "--kube-namespace", ns()}, extra...)
			d := startDaemon(t, daemonOptions{Runtime: "kubernetes", Args: args})
			server := d.serverID()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				zero := int64(0)
				sel := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"dev.ohd.server": server}).String()}
				_ = cs.CoreV1().Pods(ns()).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel)
				_ = cs.NetworkingV1().NetworkPolicies(ns()).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
			})
			return d
		},
		running: func(t testing.TB, id string) bool { _, r := pod(t, id); return r },
		exists:  func(t testing.TB, id string) bool { e, _ := pod(t, id); return e },
		kill: func(t testing.TB, id string) {
			cs := requireKube(t)
			name, _, _ := strings.Cut(id, "/")
			zero := int64(0)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cs.CoreV1().Pods(ns()).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		},
	}
}

func (d *daemon) show(id string) store.Conversation {
	d.t.Helper()
	var c store.Conversation
	d.ohctlJSON(&c, "show", id)
	return c
}

// TestBackendLifecycle: create, exec in the worktree at its own path,
// idle stop, resume on the next request, remove; on each backend.
func TestBackendLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--idle-timeout", "3s")
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree")
		if c.State != store.StateRunning || c.ContainerID == "" || c.Runtime != b.name {
			t.Fatalf("create = %+v", c)
		}
		if !b.running(t, c.ContainerID) {
			t.Fatalf("container %s does not run", c.ContainerID)
		}
		if code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
			t.Errorf("git status in the container: %d %q", code, out)
		}
		if code, out := d.execIn(c.ID, "sh", "-c", "echo from-inside > "+c.Worktree+"/inside.txt"); code != 0 {
			t.Fatalf("write in the worktree: %d %q", code, out)
		}
		if b, err := os.ReadFile(filepath.Join(c.Worktree, "inside.txt")); err != nil || string(b) != "from-inside\n" {
			t.Errorf("the host sees %q %v at the same path", b, err)
		}
		waitFor(t, 60*time.Second, "the idle conversation to stop", func() bool { return d.show(c.ID).State == store.StateStopped })
		if b.running(t, c.ContainerID) {
			t.Error("the container of a stopped conversation still runs")
		}
		if got := b.exists(t, c.ContainerID); got != b.stoppedKeepsContainer {
			t.Errorf("a stopped conversation's container exists: %v, want %v (see backend.stoppedKeepsContainer)", got, b.stoppedKeepsContainer)
		}
		if code, out := d.execIn(c.ID, catCmd(c.Worktree+"/inside.txt")...); code != 0 || out != "from-inside\n" {
			t.Errorf("after resume: %d %q", code, out)
		}
		now := d.show(c.ID)
		if now.State != store.StateRunning || !b.running(t, now.ContainerID) {
			t.Errorf("after resume: %s, container %s", now.State, now.ContainerID)
		}
		if same := now.ContainerID == c.ContainerID; same != b.stoppedKeepsContainer {
			t.Errorf("resumed in the same container: %v, want %v", same, b.stoppedKeepsContainer)
		}
		d.ohctl("rm", now.ID)
		if b.exists(t, now.ContainerID) {
			t.Error("container left after rm")
		}
	})
}

// TestBackendHardening: the agent runs as its own uid (agentUID, neither
// root nor the repository's owner, since issue 26) with no capabilities
// and no-new-privileges, and
// ohctl doctor finds the container hardened.
func TestBackendHardening(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--read-only-rootfs")
		repo := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: 1000, GID: 1000}})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
		_, status := d.execIn(c.ID, catCmd("/proc/self/status")...)
		for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", agentUID)} {
			if !strings.Contains(status, want) {
				t.Errorf("/proc/self/status lacks %q", want)
			}
		}
		if code, _ := d.execIn(c.ID, "sh", "-c", "echo x > /rootfile"); code == 0 {
			t.Error("the read-only root took a write")
		}
		// No credential of the engine in reach of the agent: on Kubernetes
		// no ServiceAccount token is mounted (the pod could otherwise call
		// the API server as its account).
		if code, out := d.execIn(c.ID, "sh", "-c", "test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo present; test -e /var/run/docker.sock && echo socket; :"); code != 0 || strings.Contains(out, "present") || strings.Contains(out, "socket") {
			t.Errorf("an engine credential inside the container: %d %q", code, out)
		}
		var hardened bool
		for _, ch := range d.doctorChecks(c.ID) {
			if ch.Check == "container-hardening" {
				hardened = ch.Status == "ok"
				if !hardened {
					t.Errorf("doctor: %+v", ch)
				}
			}
		}
		if !hardened {
			t.Error("doctor ran no container-hardening check")
		}
		d.ohctl("rm", c.ID)
	})
}

// TestBackendBrokerSocket: the broker socket mounted into the container
// answers there: git's credential helper (ohctl at /run/ohd/bin) gets the
// granted host's password and nothing for another.
func TestBackendBrokerSocket(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		if _, err := d.ohctlIn("ghp-broker-reachable", "secret", "set", "gh"); err != nil {
			t.Fatal(err)
		}
		d.ohctl("git-host", "set", "github.com", "--secret", "gh")
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", testenv.NewRepo(t, testenv.RepoOptions{}), "--worktree", "--grant-git", "github.com/my-org")
		d.ohctl("grant", c.ID, "git", "github.com/my-org", "--git-relay=false")
		fill := func(url string) (int, string) {
			return d.execIn(c.ID, "sh", "-c", "printf 'url="+url+"\\n\\n' | GIT_TERMINAL_PROMPT=0 git -C "+c.Worktree+" credential fill")
		}
		if code, out := fill("https://github.com/my-org/repo.git"); code != 0 || !strings.Contains(out, "password=ghp-broker-reachable") {
			t.Errorf("granted host through the broker socket: %d %q", code, out)
		}
		if code, out := fill("https://github.com/other-org/repo.git"); code == 0 || strings.Contains(out, "ghp-broker-reachable") {
			t.Errorf("ungranted path: %d %q", code, out)
		}
		d.ohctl("rm", "--discard", c.ID)
	})
}

// TestBackendAdoptionAfterRestart: ohd is killed and started again; the
// running conversation's container is adopted (same id, still running,
// reached), and one removed while ohd was down is marked stopped.
func TestBackendAdoptionAfterRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		var a, g store.Conversation
		d.ohctlJSON(&a, "create", "--repo", repo, "--worktree")
		d.ohctlJSON(&g, "create", "--repo", repo, "--worktree")
		d.kill()
		b.kill(t, g.ContainerID)
		waitFor(t, 60*time.Second, "the killed container to be gone", func() bool { return !b.exists(t, g.ContainerID) })
		d.start()
		if a2 := d.show(a.ID); a2.State != store.StateRunning || a2.ContainerID != a.ContainerID || !b.running(t, a.ContainerID) {
			t.Errorf("a not adopted: %s %s (was %s)", a2.State, a2.ContainerID, a.ContainerID)
		}
		if g2 := d.show(g.ID); g2.State != store.StateStopped {
			t.Errorf("g's container is gone but its record is %s", g2.State)
		}
		if code, out := d.execIn(a.ID, "git", "-C", a.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+a.ID) {
			t.Errorf("adopted conversation: %d %q", code, out)
		}
		d.ohctl("rm", a.ID)
		d.ohctl("rm", g.ID)
	})
}

// TestBackendOOMInsideIsNotADeath: a process in the conversation's
// container (a build) is killed for memory; the container and its inner
// server run on, and ohd keeps the record running.
func TestBackendOOMInsideIsNotADeath(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		id, _ := d.apiCreate(map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
		c := d.record(id)
		if code, out := d.innerExec(id, "sh", "-c", "echo before"); code != 0 || !strings.Contains(out, "before") {
			t.Fatalf("exec before the OOM: %d %q", code, out)
		}
		code, out := d.execIn(id, "sh", "-c", "a=0123456789abcdef; while :; do a=\"$a$a\"; done")
		if code == 0 {
			t.Fatalf("the memory hog exited 0: %q", out)
		}
		if got := d.record(id); got.State != store.StateRunning || got.ContainerID != c.ContainerID {
			t.Errorf("after an OOM kill inside: %s %s, want running %s", got.State, got.ContainerID, c.ContainerID)
		}
		if !b.running(t, c.ContainerID) {
			t.Fatal("the container itself stopped")
		}
		if code, out := d.innerExec(id, "sh", "-c", "echo after"); code != 0 || !strings.Contains(out, "after") {
			t.Errorf("exec after the OOM: %d %q", code, out)
		}
	})
}

// catCmd prints a file with the shell alone: the test image has no cat.
func catCmd(path string) []string {
	return []string{"sh", "-c", `while IFS= read -r l; do printf '%s\n' "$l"; done < "$0"`, path}
}

// TestBackendEgressIsolationClaim: in broker mode ohd claims isolation
// only where it holds. Docker's containers have no network at all: no
// note, doctor has no policy check. A Kubernetes pod gets a deny-all
// egress NetworkPolicy, which this cluster's bridge plugin does not
// enforce and ohd cannot tell is enforced: the create answer says so (an
// X-Ohd-Note) and doctor warns (egress-policy) — a difference by design.
func TestBackendEgressIsolationClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t, "--egress", "broker")
		r := d.call("POST", "/api/conversations", map[string]any{"workspace": map[string]any{"working_dir": testenv.NewRepo(t, testenv.RepoOptions{})}})
		if r.Status != 201 {
			t.Fatalf("create = %d %s", r.Status, r.Body)
		}
		id := r.Header.Get("X-Ohd-Conversation-Id")
		noted := false
		for _, n := range r.Header.Values("X-Ohd-Note") {
			noted = noted || strings.Contains(n, "cannot tell whether this cluster's network plugin enforces NetworkPolicy")
		}
		var policy *string
		for _, ch := range d.doctorChecks(id) {
			if ch.Check == "egress-policy" {
				s := ch.Status + ": " + ch.Detail
				policy = &s
			}
		}
		switch b.name {
		case "docker":
			if noted || policy != nil {
				t.Errorf("Docker's network mode none is isolation: note %v, doctor %v", noted, policy)
			}
		case "kubernetes":
			if !noted {
				t.Errorf("the create answer does not say the policy may not be enforced: %v", r.Header.Values("X-Ohd-Note"))
			}
			if policy == nil || !strings.HasPrefix(*policy, "warn: ") {
				t.Errorf("doctor's egress-policy check: %v, want a warning", policy)
			}
		}
		d.ohctl("rm", id)
	})
}
