package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// Kind is what Kube.Kind returns.
const Kind = "kubernetes"

// ContainerName is the name of the container inside each pod.
const ContainerName = "agent"

// CallTimeout bounds one API call made with a context that has no deadline
// of its own (watches, log streams and exec sessions end with their ctx).
const CallTimeout = 30 * time.Second

// ImageConfigFunc reads an image's configuration (entrypoint and command)
// as the node has it. The Kubernetes API does not expose it; ohd serve
// passes [CRIImageConfig], which asks the node's container runtime.
type ImageConfigFunc func(ctx context.Context, ref string) (runtime.Image, error)

// Options configure New.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; "" uses the in-cluster
	// ServiceAccount (KUBERNETES_SERVICE_HOST and the mounted token).
	Kubeconfig string
	// Namespace holds every pod and NetworkPolicy ohd makes (required).
	Namespace string
	// Node is the node ohd runs on: every pod is pinned to it (nodeName),
	// because its hostPath volumes are this node's directories. "" reads
	// the NODE_NAME environment variable (the downward API in the
	// DaemonSet manifest).
	Node string
	// PullImages lets the kubelet pull an image the node lacks
	// (imagePullPolicy IfNotPresent); the default, Never, runs only images
	// the node has.
	PullImages bool
	// PolicyEnforced says the operator knows the cluster's network plugin
	// enforces NetworkPolicy; without it ohd tells only from the node's
	// annotations (Calico, Cilium), see PolicyEnforcement.
	PolicyEnforced bool
	// ImageConfig reads image configuration; nil makes ResolveImage fail
	// with a message saying so.
	ImageConfig ImageConfigFunc
	// Logger gets warnings; nil discards.
	Logger *slog.Logger
	// RestConfig, if set, is used instead of Kubeconfig (tests, benches).
	RestConfig *rest.Config
	// OnStep, if set, is called as Start passes each step, as the Docker
	// runtime's is: "created" (the API server took the pod) and "started"
	// (its agent container runs, before readiness). Crash tests stop the
	// daemon there. The exec API is one call: no exec steps.
	OnStep func(step string)
	// EngineTimeout is how long an exec may say nothing before ohd looks
	// whether the pod runs commands at all (Exec's watchdog), and how long
	// past a deletion's grace period the kubelet has to stop the pod; 0
	// means CallTimeout. What outlives it is a stall (Stalls).
	EngineTimeout time.Duration
}

// Kube is the Kubernetes runtime: one pod per conversation on ohd's own
// node. It keeps no state: the pods' labels are the record.
type Kube struct {
	cs        kubernetes.Interface
	rc        *rest.Config
	ns        string
	node      string
	pull      bool
	enforced  bool
	imgConfig ImageConfigFunc
	log       *slog.Logger
	host      string
	httpc     *http.Client
	// onWatch, if set, is called each time Events has its watch (tests).
	onWatch func()
	onStep  func(string)
	// engineTimeout is Options.EngineTimeout with its default; stalls
	// are the calls given up on.
	engineTimeout time.Duration
	stalls        runtime.StallLog
}

var (
	_ runtime.Runtime     = (*Kube)(nil)
	_ runtime.NetnsOpener = (*Kube)(nil)
)

// New connects to the API server and checks it answers and that the node
// exists and is ohd's (it must be named, see Options.Node).
func New(ctx context.Context, o Options) (*Kube, error) {
	rc := o.RestConfig
	if rc == nil {
		var err error
		if o.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		} else {
			rc, err = rest.InClusterConfig()
			if err != nil {
				err = fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes runtime: %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "ohd"
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes runtime: %w", err)
	}
	node := o.Node
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	switch {
	case o.Namespace == "":
		return nil, fmt.Errorf("kubernetes runtime: %w: no namespace", runtime.ErrInvalidSpec)
	case node == "":
		return nil, fmt.Errorf("kubernetes runtime: %w: no node: pass --kube-node or set NODE_NAME (the downward API's spec.nodeName)", runtime.ErrInvalidSpec)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Kube{cs: cs, rc: rc, ns: o.Namespace, node: node, pull: o.PullImages, enforced: o.PolicyEnforced,
		imgConfig: o.ImageConfig, log: log, host: rc.Host, onStep: o.OnStep, engineTimeout: cmp.Or(o.EngineTimeout, CallTimeout),
		httpc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	if err := k.Ping(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// Clientset is the client this runtime uses (tests and benches).
func (k *Kube) Clientset() kubernetes.Interface { return k.cs }

// Namespace is where the pods are.
func (k *Kube) Namespace() string { return k.ns }

// Node is the node every pod is pinned to.
func (k *Kube) Node() string { return k.node }

// Kind returns "kubernetes".
func (k *Kube) Kind() string { return Kind }

// Host is the API server's address.
func (k *Kube) Host() string { return k.host }

// Close releases idle connections.
func (k *Kube) Close() error {
	k.httpc.CloseIdleConnections()
	return nil
}

func call(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, CallTimeout)
}

// Ping checks the API server answers.
func (k *Kube) Ping(ctx context.Context) error {
	cctx, cancel := call(ctx)
	defer cancel()
	if err := k.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(cctx).Error(); err != nil {
		return k.wrap("reach the API server at", k.host, err)
	}
	return nil
}

// wrap names the operation and classifies the API's error: not found,
// conflict, or an API server that does not answer
// (runtime.ErrEngineUnavailable).
func (k *Kube) wrap(op, obj string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s: %w", op, obj, runtime.ErrNotFound)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s %s: %w", op, obj, runtime.ErrConflict)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %s: %w", op, obj, err)
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s %s: %w", op, obj, err)
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Code != 0 && se.Status().Code < 500 {
		return fmt.Errorf("%s %s: %w", op, obj, err)
	}
	return fmt.Errorf("%s %s: %w: %v: the Kubernetes API server at %s does not answer; live conversations keep running, new ones wait for it: check the API server (or the server of --kubeconfig)",
		op, obj, runtime.ErrEngineUnavailable, err, k.host)
}

// ID is a pod's container id as ohd records it: its name and UID, so that
// a later pod of the same conversation (same name) is another container.
func ID(p *corev1.Pod) string { return p.Name + "/" + string(p.UID) }

// splitID parses ID's form; a bare name has no UID (any pod of that name).
func splitID(id string) (name string, uid types.UID) {
	n, u, _ := strings.Cut(id, "/")
	return n, types.UID(u)
}

// get returns the pod id names; ErrNotFound when it is gone or is another
// pod of the same name.
func (k *Kube) get(ctx context.Context, id string) (*corev1.Pod, error) {
	name, uid := splitID(id)
	cctx, cancel := call(ctx)
	defer cancel()
	p, err := k.cs.CoreV1().Pods(k.ns).Get(cctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, k.wrap("get pod", id, err)
	}
	if uid != "" && p.UID != uid {
		return nil, fmt.Errorf("get pod %s: %w (a later pod has its name)", id, runtime.ErrNotFound)
	}
	return p, nil
}

func agentStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func innerPortOf(p *corev1.Pod) int {
	if n, err := strconv.Atoi(p.Labels[runtime.LabelInnerPort]); err == nil && n > 0 {
		return n
	}
	return runtime.DefaultInnerPort
}

// evicted says the kubelet evicted the pod (memory or disk pressure).
func evicted(p *corev1.Pod) bool { return p.Status.Reason == "Evicted" }

// container describes a pod as the runtime interface does.
func container(p *corev1.Pod) runtime.Container {
	c := runtime.Container{
		ID:             ID(p),
		Name:           p.Name,
		ConversationID: p.Labels[runtime.LabelConversation],
		ServerID:       p.Labels[runtime.LabelServer],
		Role:           p.Labels[runtime.LabelRole],
		NoNetwork:      p.Labels[runtime.LabelNetwork] == "none",
		WorkingDir:     "",
	}
	if len(p.Spec.Containers) > 0 {
		c.WorkingDir = p.Spec.Containers[0].WorkingDir
	}
	st := agentStatus(p)
	switch {
	case p.DeletionTimestamp != nil:
		c.State = "removing"
	case st != nil && st.State.Running != nil:
		c.State = "running"
	case st != nil && st.State.Terminated != nil, p.Status.Phase == corev1.PodFailed, p.Status.Phase == corev1.PodSucceeded:
		c.State = "exited"
	default:
		c.State = "created"
	}
	if st != nil {
		c.ImageID = st.ImageID
		if t := st.State.Terminated; t != nil {
			c.ExitCode = int(t.ExitCode)
			c.OOMKilled = t.Reason == "OOMKilled"
		} else if t := st.LastTerminationState.Terminated; t != nil && c.State != "running" {
			c.ExitCode = int(t.ExitCode)
			c.OOMKilled = t.Reason == "OOMKilled"
		}
	}
	if evicted(p) {
		// The kubelet killed it for the node's lack of memory (or disk):
		// reported as the Docker runtime reports a kill for memory.
		c.OOMKilled = true
		if c.ExitCode == 0 {
			c.ExitCode = 137
		}
	}
	c.Running = c.State == "running" && p.Status.PodIP != ""
	if c.Running && c.Role == "" {
		c.HostPort = innerPortOf(p)
	}
	return c
}

// Inspect describes the pod id (ID's form, or a bare pod name), with
// the mounts of its agent container: its hostPath volumes, as the Docker
// runtime reports its bind mounts (doctor's fixed-pointers check and
// the start's check for out-of-date mounts read them).
func (k *Kube) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	p, err := k.get(ctx, id)
	if err != nil {
		return runtime.Container{}, err
	}
	c := container(p)
	c.Mounts = hostMounts(p)
	return c, nil
}

// hostMounts are the agent container's hostPath volume mounts, in the
// pod's order; never nil.
func hostMounts(p *corev1.Pod) []runtime.Mount {
	paths := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	ms := []runtime.Mount{}
	for _, ctr := range p.Spec.Containers {
		if ctr.Name != ContainerName {
			continue
		}
		for _, vm := range ctr.VolumeMounts {
			if src, ok := paths[vm.Name]; ok {
				ms = append(ms, runtime.Mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
			}
		}
	}
	return ms
}

func serverSelector(serverID string) string {
	return labels.SelectorFromSet(labels.Set{runtime.LabelServer: serverID}).String()
}

// List returns every pod labelled with serverID in the namespace.
func (k *Kube) List(ctx context.Context, serverID string) ([]runtime.Container, error) {
	if serverID == "" {
		return nil, fmt.Errorf("list pods: %w: server id is empty", runtime.ErrInvalidSpec)
	}
	cctx, cancel := call(ctx)
	defer cancel()
	l, err := k.cs.CoreV1().Pods(k.ns).List(cctx, metav1.ListOptions{LabelSelector: serverSelector(serverID)})
	if err != nil {
		return nil, k.wrap("list pods of server", serverID, err)
	}
	out := make([]runtime.Container, 0, len(l.Items))
	for i := range l.Items {
		if l.Items[i].Labels[runtime.LabelServer] == serverID {
			out = append(out, container(&l.Items[i]))
		}
	}
	slices.SortFunc(out, func(a, b runtime.Container) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ResolveImage returns ref with its configuration (Options.ImageConfig).
// The reference itself is what pods name: a kubelet resolves it on the
// node, where it must be (imagePullPolicy Never) unless PullImages.
func (k *Kube) ResolveImage(ctx context.Context, ref string) (runtime.Image, error) {
	if k.imgConfig == nil {
		return runtime.Image{}, fmt.Errorf("resolve image %s: the kubernetes runtime was given no way to read an image's entrypoint (Options.ImageConfig)", ref)
	}
	// The image is read from the node's container runtime, not the API
	// server: the API server is asked too, so that a create finds it away
	// here, before anything is provisioned (as Docker's image inspect
	// does), not at the pod after the worktree and the broker.
	ping := make(chan error, 1)
	go func() { ping <- k.Ping(ctx) }()
	img, err := k.imgConfig(ctx, ref)
	if perr := <-ping; perr != nil {
		return runtime.Image{}, fmt.Errorf("resolve image %s: %w", ref, perr)
	}
	if err != nil {
		return runtime.Image{}, err
	}
	// The pod names the reference as given: the kubelet resolves it in
	// the node's container runtime, not by Docker's image ID, so it is
	// not pinned (Floating would claim a pin).
	img.Ref, img.ID, img.Floating = ref, ref, false
	return img, nil
}

// Pulls is empty: the kubelet pulls, and only with PullImages.
func (k *Kube) Pulls() []runtime.Pull { return nil }

// Stop deletes the pod, giving its processes timeout to end (SIGTERM,
// then SIGKILL), and waits until the kubelet has stopped it. Its state
// (worktree, inner state) is on the node's disk and stays.
func (k *Kube) Stop(ctx context.Context, id string, timeout time.Duration) error {
	if _, err := k.get(ctx, id); err != nil {
		return err
	}
	return k.deletePod(ctx, id, timeout)
}

// Remove deletes the pod (1 s to end) and its NetworkPolicy, and waits
// until it is gone; a missing pod is no error.
func (k *Kube) Remove(ctx context.Context, id string) error {
	name, _ := splitID(id)
	err := k.deletePod(ctx, id, time.Second)
	if errors.Is(err, runtime.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return err
	}
	cctx, cancel := call(ctx)
	defer cancel()
	if err := k.cs.NetworkingV1().NetworkPolicies(k.ns).Delete(cctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return k.wrap("delete network policy", name, err)
	}
	return nil
}

// deletePod deletes pod id (only that UID) with grace and waits for it
// to be gone from the API, which the kubelet confirms once its containers
// have stopped.
func (k *Kube) deletePod(ctx context.Context, id string, grace time.Duration) error {
	name, uid := splitID(id)
	secs := int64(math.Ceil(grace.Seconds()))
	opts := metav1.DeleteOptions{GracePeriodSeconds: &secs}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	cctx, cancel := call(ctx)
	err := k.cs.CoreV1().Pods(k.ns).Delete(cctx, name, opts)
	cancel()
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or another pod (a later one) has the name.
		return fmt.Errorf("delete pod %s: %w", id, runtime.ErrNotFound)
	case err != nil:
		return k.wrap("delete pod", id, err)
	}
	// The kubelet ends the containers within the grace period; a kubelet
	// that does not answer would leave the pod terminating for good.
	wait := grace + k.engineTimeout
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	err = k.waitPod(wctx, name, uid, func(p *corev1.Pod) (bool, error) { return p == nil, nil })
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		st := k.stall("stop (the kubelet did not stop the pod)", id, wait)
		return fmt.Errorf("delete pod %s: %w: %s (the node's container runtime may be wedged on it; the pod stays terminating until the kubelet stops it)", id, runtime.ErrEngineTimeout, st)
	}
	return err
}

// waitPod calls cond with the pod name (nil once it is gone or replaced
// by another UID) each time it changes, until cond says done or fails or
// ctx ends.
func (k *Kube) waitPod(ctx context.Context, name string, uid types.UID, cond func(*corev1.Pod) (bool, error)) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		cctx, cancel := call(ctx)
		l, err := k.cs.CoreV1().Pods(k.ns).List(cctx, metav1.ListOptions{FieldSelector: sel})
		cancel()
		if err != nil {
			return k.wrap("get pod", name, err)
		}
		var p *corev1.Pod
		if len(l.Items) == 1 && (uid == "" || l.Items[0].UID == uid) {
			p = &l.Items[0]
		}
		if done, err := cond(p); done || err != nil {
			return err
		}
		w, err := k.cs.CoreV1().Pods(k.ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: l.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("wait for pod %s: %w", name, ctx.Err())
			}
			return k.wrap("watch pod", name, err)
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return true, fmt.Errorf("wait for pod %s: %w", name, ctx.Err())
				case ev, ok := <-w.ResultChan():
					if !ok {
						return false, nil // relist
					}
					np, isPod := ev.Object.(*corev1.Pod)
					if !isPod {
						return false, nil // an error event (expired version): relist
					}
					var p *corev1.Pod
					if ev.Type != "DELETED" && (uid == "" || np.UID == uid) {
						p = np
					}
					if uid != "" && np.UID != uid && ev.Type != "DELETED" {
						p = nil // a later pod of the same name: ours is gone
					}
					if done, err := cond(p); done || err != nil {
						return true, err
					}
				}
			}
		}()
		if done {
			return err
		}
	}
}

// Pause cannot freeze a pod: Kubernetes has no such operation. It stops
// the pod instead (its state stays on the node) and says so with an
// error wrapping ErrStoppedNotPaused and ErrNotRunning: nothing of the
// agent runs afterwards, which is what a caller pausing before it saves
// the agent's work needs; one that must let it run on starts it again.
func (k *Kube) Pause(ctx context.Context, id string) error {
	if _, err := k.get(ctx, id); err != nil {
		return err
	}
	if err := k.deletePod(ctx, id, 10*time.Second); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	return fmt.Errorf("pod %s was stopped, not frozen (Kubernetes cannot freeze a pod): %w (%w)", id, runtime.ErrStoppedNotPaused, runtime.ErrNotRunning)
}

// Unpause has nothing to thaw (see Pause).
func (k *Kube) Unpause(ctx context.Context, id string) error {
	if _, err := k.get(ctx, id); err != nil {
		return err
	}
	return nil
}

// Logs copies the agent container's output. Kubernetes merges standard
// output and error into one stream: all of it goes to stdout.
func (k *Kube) Logs(ctx context.Context, id string, follow bool, stdout, _ io.Writer) error {
	name, _ := splitID(id)
	if _, err := k.get(ctx, id); err != nil {
		return err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if !follow {
		rctx, cancel = call(ctx)
	}
	defer cancel()
	rc, err := k.cs.CoreV1().Pods(k.ns).GetLogs(name, &corev1.PodLogOptions{Container: ContainerName, Follow: follow}).Stream(rctx)
	if err != nil {
		return k.wrap("logs of pod", id, err)
	}
	defer rc.Close()
	if _, err := io.Copy(stdout, rc); err != nil {
		if follow && ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("logs of pod %s: %w", id, err)
	}
	return nil
}

func (k *Kube) logTail(ctx context.Context, name string, n int64) string {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	b, err := k.cs.CoreV1().Pods(k.ns).GetLogs(name, &corev1.PodLogOptions{Container: ContainerName, TailLines: &n}).DoRaw(cctx)
	if err != nil {
		return ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// OpenNetns returns a dialer to the running pod's inner server at its IP
// on this node: ohd runs on the pod's node, where the network plugin
// routes pod IPs, so nothing is published.
func (k *Kube) OpenNetns(ctx context.Context, id string) (*runtime.NetnsDialer, error) {
	p, err := k.get(ctx, id)
	if err != nil {
		return nil, err
	}
	c := container(p)
	if !c.Running {
		return nil, fmt.Errorf("pod %s is not running", id)
	}
	return runtime.NewAddrDialer(ID(p), net.JoinHostPort(p.Status.PodIP, strconv.Itoa(innerPortOf(p)))), nil
}

// DialOnly says pods are reached only through OpenNetns's dialer.
func (k *Kube) DialOnly() bool { return true }

// ProbeNetns always succeeds: pod IPs are routed on their node, where
// ohd runs, so a pod without egress is still reached (ohd serve --egress
// broker).
func (k *Kube) ProbeNetns() error { return nil }

// PolicyEnforcement says whether the cluster enforces the NetworkPolicy
// ohd makes for a conversation in broker mode, and how ohd knows. ohd
// knows it only from the operator (--kube-policy-enforced) or from the
// node's annotations written by Calico or Cilium; the bridge, flannel and
// other plugins without a policy engine store policies and enforce
// nothing.
func (k *Kube) PolicyEnforcement(ctx context.Context) (enforced bool, why string) {
	if k.enforced {
		return true, "the operator says the cluster's network plugin enforces NetworkPolicy (--kube-policy-enforced)"
	}
	cctx, cancel := call(ctx)
	defer cancel()
	n, err := k.cs.CoreV1().Nodes().Get(cctx, k.node, metav1.GetOptions{})
	if err == nil {
		for a := range n.Annotations {
			switch {
			case strings.HasPrefix(a, "projectcalico.org/"):
				return true, "node " + k.node + " runs Calico, which enforces NetworkPolicy"
			case strings.HasPrefix(a, "network.cilium.io/"), strings.HasPrefix(a, "io.cilium"):
				return true, "node " + k.node + " runs Cilium, which enforces NetworkPolicy"
			}
		}
	}
	return false, "ohd cannot tell whether this cluster's network plugin enforces NetworkPolicy (Calico and Cilium do; the bridge plugin and flannel do not): a conversation's deny-all egress policy may be ignored, so its pod may reach the network; pass --kube-policy-enforced once you know it does"
}

// Hardening lists how pod id departs from ohd's hardening: user,
// capabilities, privilege escalation, privileged mode, host namespaces,
// limits, node.
func (k *Kube) Hardening(ctx context.Context, id string, uid, gid int) ([]string, error) {
	p, err := k.get(ctx, id)
	if err != nil {
		return nil, err
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC {
		bad("shares a host namespace (network %v, pid %v, ipc %v)", p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC)
	}
	if p.Spec.NodeName != k.node {
		bad("runs on node %q, not ohd's node %q", p.Spec.NodeName, k.node)
	}
	var c *corev1.Container
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == ContainerName {
			c = &p.Spec.Containers[i]
		}
	}
	if c == nil || c.SecurityContext == nil {
		return append(problems, "the pod has no agent container with a security context"), nil
	}
	sc := c.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != int64(uid) || sc.RunAsGroup == nil || *sc.RunAsGroup != int64(gid) {
		bad("does not run as the repository owner %d:%d", uid, gid)
	}
	if sc.Capabilities == nil || !slices.ContainsFunc(sc.Capabilities.Drop, func(c corev1.Capability) bool { return strings.EqualFold(string(c), "ALL") }) {
		bad("capabilities not all dropped")
	}
	if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
		bad("capabilities added: %v", sc.Capabilities.Add)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		bad("privilege escalation allowed (no-new-privileges not set)")
	}
	if sc.Privileged != nil && *sc.Privileged {
		bad("privileged")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
		bad("no seccomp profile")
	}
	lim := c.Resources.Limits
	if q, ok := lim[corev1.ResourceMemory]; !ok || q.IsZero() {
		bad("no memory limit")
	}
	if q, ok := lim[corev1.ResourceCPU]; !ok || q.IsZero() {
		bad("no CPU limit")
	}
	return problems, nil
}

func quantityBytes(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.BinarySI) }

// RouteClientLogs sends what client-go logs (through klog, to standard
// error by default) to log at debug level: it reports, as errors, the
// ends of exec streams ohd closed itself ("Copying stdout failed",
// "Websocket Ping failed"), and every failure that matters to ohd comes
// back as an error from the call. klog is process-wide: the daemon calls
// this once.
func RouteClientLogs(log *slog.Logger) {
	klog.SetLogger(logr.FromSlogHandler(debugHandler{log.Handler()}))
}

// debugHandler logs every record at debug level.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h debugHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugHandler{h.Handler.WithAttrs(as)}
}

func (h debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{h.Handler.WithGroup(name)}
}
