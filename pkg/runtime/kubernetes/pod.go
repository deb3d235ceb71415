package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// Requests are what a pod asks the scheduler to reserve; its limits are
// Spec.Resources. They are small on purpose: a 2-CPU, 4 GiB limit per
// conversation requested in full would fit one conversation on a small
// node, where Docker runs as many as the machine bears.
var (
	requestCPU    = resource.MustParse("10m")
	requestMemory = resource.MustParse("64Mi")
)

// PodFor is the pod of spec s (defaults applied and checked) on node: what
// Start creates. Exported for the manifest tests and benches.
func (k *Kube) PodFor(s runtime.Spec, role string) *corev1.Pod {
	name := runtime.ContainerName(s.ConversationID)
	if role == runtime.RoleSandbox {
		name = runtime.SandboxName(s.ConversationID)
	}
	lbl := map[string]string{}
	maps.Copy(lbl, s.Labels)
	lbl[runtime.LabelServer] = s.ServerID
	lbl[runtime.LabelConversation] = s.ConversationID
	if role == "" {
		lbl[runtime.LabelInnerPort] = strconv.Itoa(s.InnerPort)
	} else {
		lbl[runtime.LabelRole] = role
	}
	if s.NoNetwork || role == runtime.RoleSandbox {
		lbl[runtime.LabelNetwork] = "none"
	}
	uid, gid := int64(s.UID), int64(s.GID)
	no := false
	zero := int64(10)
	pull := corev1.PullNever
	if k.pull {
		pull = corev1.PullIfNotPresent
	}
	c := corev1.Container{
		Name:            ContainerName,
		Image:           s.Image,
		ImagePullPolicy: pull,
		Command:         s.Entrypoint,
		Args:            s.Cmd,
		WorkingDir:      s.WorkingDir,
		Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{
				corev1.ResourceMemory: quantityBytes(s.Resources.MemoryBytes),
				corev1.ResourceCPU:    *resource.NewMilliQuantity(s.Resources.NanoCPUs/1_000_000, resource.DecimalSI),
			},
			Requests: corev1.ResourceList{corev1.ResourceMemory: requestMemory, corev1.ResourceCPU: requestCPU},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                &uid,
			RunAsGroup:               &gid,
			AllowPrivilegeEscalation: &no,
			Privileged:               &no,
			ReadOnlyRootFilesystem:   &s.ReadOnlyRootfs,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if s.Resources.MemoryBytes > 0 && requestMemory.Value() > s.Resources.MemoryBytes {
		c.Resources.Requests[corev1.ResourceMemory] = quantityBytes(s.Resources.MemoryBytes)
	}
	for _, e := range s.Env {
		kv, v, _ := strings.Cut(e, "=")
		c.Env = append(c.Env, corev1.EnvVar{Name: kv, Value: v})
	}
	var vols []corev1.Volume
	for i, m := range s.Mounts {
		vn := "m" + strconv.Itoa(i)
		hp := corev1.HostPathUnset
		vols = append(vols, corev1.Volume{Name: vn, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.Source, Type: &hp}}})
		vm := corev1.VolumeMount{Name: vn, MountPath: m.Target, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			// Read-only all the way down where the runtime can (a host
			// mount under the source stays read-only too).
			rro := corev1.RecursiveReadOnlyIfPossible
			vm.RecursiveReadOnly = &rro
		}
		c.VolumeMounts = append(c.VolumeMounts, vm)
	}
	if s.ReadOnlyRootfs {
		size := quantityBytes(s.TmpSize)
		vols = append(vols, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: lbl},
		Spec: corev1.PodSpec{
			NodeName:                      k.node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      runtime.HostnameOf(s.ConversationID),
			TerminationGracePeriodSeconds: &zero,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{c},
			Volumes:    vols,
			// A pod ohd pins to its node must not be evicted for a taint
			// another node would not have; the kubelet still evicts it for
			// memory pressure (reported as a kill for memory).
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	if s.NoNetwork || role == runtime.RoleSandbox {
		// No DNS either: the broker's relay (on loopback) is the way out.
		p.Spec.DNSPolicy = corev1.DNSNone
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	}
	return p
}

// PolicyFor is the NetworkPolicy of a conversation without egress: its
// pods (conversation and sandbox) may send nothing; ingress is left as
// the plugin has it (ohd reaches the inner server from the node, and the
// inner server wants its session key).
func (k *Kube) PolicyFor(s runtime.Spec) *netv1.NetworkPolicy {
	return &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: runtime.ContainerName(s.ConversationID), Namespace: k.ns,
			Labels: map[string]string{runtime.LabelServer: s.ServerID, runtime.LabelConversation: s.ConversationID},
		},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				runtime.LabelServer: s.ServerID, runtime.LabelConversation: s.ConversationID,
			}},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeEgress},
			Egress:      []netv1.NetworkPolicyEgressRule{},
		},
	}
}

// ensurePolicy creates (or updates) the conversation's deny-all egress
// policy before its pod exists, so the pod never runs without it.
func (k *Kube) ensurePolicy(ctx context.Context, s runtime.Spec) error {
	np := k.PolicyFor(s)
	cctx, cancel := call(ctx)
	defer cancel()
	_, err := k.cs.NetworkingV1().NetworkPolicies(k.ns).Create(cctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := k.cs.NetworkingV1().NetworkPolicies(k.ns).Get(cctx, np.Name, metav1.GetOptions{})
		if gerr != nil {
			return k.wrap("get network policy", np.Name, gerr)
		}
		np.ResourceVersion = old.ResourceVersion
		_, err = k.cs.NetworkingV1().NetworkPolicies(k.ns).Update(cctx, np, metav1.UpdateOptions{})
	}
	if err != nil {
		return k.wrap("create network policy", np.Name, err)
	}
	return nil
}

// Start creates the conversation's pod on ohd's node, waits until it runs
// and its inner server answers GET <HealthPath> with 200 at the pod's IP.
// On any failure the pod is deleted and the error is a *StartError.
func (k *Kube) Start(ctx context.Context, s runtime.Spec) (runtime.Instance, error) {
	s, err := runtime.PrepareSpec(s)
	name := runtime.ContainerName(s.ConversationID)
	if err != nil {
		return runtime.Instance{}, &runtime.StartError{Step: runtime.StepCreate, Name: name, Err: err}
	}
	t0 := time.Now()
	if s.NoNetwork {
		if err := k.ensurePolicy(ctx, s); err != nil {
			return runtime.Instance{}, &runtime.StartError{Step: runtime.StepCreate, Name: name, Err: err}
		}
	}
	cctx, cancel := call(ctx)
	p, err := k.cs.CoreV1().Pods(k.ns).Create(cctx, k.PodFor(s, ""), metav1.CreateOptions{})
	cancel()
	if err != nil {
		return runtime.Instance{}, &runtime.StartError{Step: runtime.StepCreate, Name: name, Err: k.wrap("create pod", name, err)}
	}
	inst := runtime.Instance{ContainerID: ID(p), Name: name, NoNetwork: true}
	inst.Timings.Create = time.Since(t0)
	k.step("created")
	t1 := time.Now()
	p, err = k.waitRunning(ctx, p, s)
	if err != nil {
		return runtime.Instance{}, k.failStart(ctx, runtime.StepStart, inst.ContainerID, nil, err)
	}
	k.step("started")
	inst.HostPort = s.InnerPort
	inst.Addr = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(s.InnerPort))
	inst.Timings.Start = time.Since(t1)
	t2 := time.Now()
	if err := k.waitReady(ctx, p, inst.Addr, s); err != nil {
		return runtime.Instance{}, k.failStart(ctx, runtime.StepReady, inst.ContainerID, nil, err)
	}
	inst.Timings.Ready = time.Since(t2)
	return inst, nil
}

func (k *Kube) step(name string) {
	if k.onStep != nil {
		k.onStep(name)
	}
}

// failStart deletes a pod that did not start, collecting what it said.
func (k *Kube) failStart(ctx context.Context, step, id string, p *corev1.Pod, cause error) error {
	name, _ := splitID(id)
	se := &runtime.StartError{Step: step, Name: name, ContainerID: id, Err: cause}
	if p == nil {
		if got, err := k.get(context.WithoutCancel(ctx), id); err == nil {
			p = got
		}
	}
	if p != nil {
		c := container(p)
		se.Exited, se.ExitCode, se.OOMKilled = c.State == "exited", c.ExitCode, c.OOMKilled
	}
	se.LogTail = k.logTail(ctx, name, 20)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CallTimeout)
	defer cancel()
	if err := k.deletePod(dctx, id, 0); err == nil || errors.Is(err, runtime.ErrNotFound) {
		se.Removed = true
	}
	return se
}

// imageWaitReasons are the agent container's waiting reasons that will
// not resolve by themselves.
var imageWaitReasons = map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true}

// waitRunning waits until p's agent container runs with a pod IP.
func (k *Kube) waitRunning(ctx context.Context, p *corev1.Pod, s runtime.Spec) (*corev1.Pod, error) {
	wctx, cancel := context.WithTimeout(ctx, s.ReadyTimeout)
	defer cancel()
	var last *corev1.Pod
	err := k.waitPod(wctx, p.Name, p.UID, func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return true, fmt.Errorf("%w: the pod was deleted", runtime.ErrExited)
		}
		last = p
		c := container(p)
		st := agentStatus(p)
		switch {
		case c.Running:
			return true, nil
		case c.State == "exited":
			msg := fmt.Sprintf("the pod's container exited with code %d before it was ready", c.ExitCode)
			if evicted(p) {
				msg = "the kubelet evicted the pod: " + p.Status.Message
			}
			return true, fmt.Errorf("%w: %s", runtime.ErrExited, msg)
		case st != nil && st.State.Waiting != nil && imageWaitReasons[st.State.Waiting.Reason]:
			return true, fmt.Errorf("%w: image %s is not on node %s (%s): import it into the node's container runtime (ctr -n k8s.io images import) or run ohd with --kube-pull-images",
				runtime.ErrNotFound, s.Image, k.node, st.State.Waiting.Reason)
		case st != nil && st.State.Waiting != nil && strings.HasPrefix(st.State.Waiting.Reason, "CreateContainer"):
			return true, fmt.Errorf("%w: %s: %s", runtime.ErrExited, st.State.Waiting.Reason, st.State.Waiting.Message)
		}
		return false, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("%w: the pod did not run within %v", runtime.ErrNotReady, s.ReadyTimeout)
	}
	return last, err
}

// waitReady polls the inner server's health path at the pod's IP until it
// answers 200, while watching the pod: one that stops running ends the
// wait at once with ErrExited.
func (k *Kube) waitReady(ctx context.Context, p *corev1.Pod, addr string, s runtime.Spec) error {
	rctx, cancel := context.WithTimeout(ctx, s.ReadyTimeout)
	defer cancel()
	wctx, stop := context.WithCancelCause(rctx)
	defer stop(nil)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		err := k.waitPod(wctx, p.Name, p.UID, func(p *corev1.Pod) (bool, error) {
			if p == nil {
				return true, fmt.Errorf("%w: the pod was deleted", runtime.ErrExited)
			}
			if c := container(p); !c.Running {
				return true, fmt.Errorf("%w: the pod's container exited with code %d before it was ready", runtime.ErrExited, c.ExitCode)
			}
			return false, nil
		})
		if err != nil && errors.Is(err, runtime.ErrExited) {
			stop(err)
		}
	}()
	defer func() { stop(nil); <-watching }()
	url := "http://" + addr + s.HealthPath
	delay := 10 * time.Millisecond
	var last error
	for {
		actx, acancel := context.WithTimeout(wctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(actx, http.MethodGet, url, nil)
		resp, err := k.httpc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				acancel()
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		acancel()
		last = err
		t := time.NewTimer(delay)
		select {
		case <-wctx.Done():
			t.Stop()
			if cause := context.Cause(wctx); errors.Is(cause, runtime.ErrExited) {
				return cause
			}
			if ctx.Err() != nil {
				return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
			}
			return fmt.Errorf("%w: %s did not answer 200 within %v (last attempt: %v)", runtime.ErrNotReady, s.HealthPath, s.ReadyTimeout, last)
		case <-t.C:
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// Restart finds the conversation's pod still running and waits for it to
// be ready. A pod is never started twice: a stopped conversation has none
// (Stop deletes it), so Restart gives ErrNotFound, and the caller
// creates a new one with Start. A pod that exited is deleted first.
func (k *Kube) Restart(ctx context.Context, id string, s runtime.Spec) (runtime.Instance, error) {
	s, err := runtime.PrepareReadiness(s)
	if err != nil {
		return runtime.Instance{}, err
	}
	p, err := k.get(ctx, id)
	if err != nil {
		return runtime.Instance{}, err
	}
	c := container(p)
	if !c.Running {
		if err := k.deletePod(ctx, id, 0); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return runtime.Instance{}, err
		}
		return runtime.Instance{}, fmt.Errorf("pod %s had stopped and is deleted: %w", id, runtime.ErrNotFound)
	}
	inst := runtime.Instance{ContainerID: ID(p), Name: p.Name, NoNetwork: true, HostPort: innerPortOf(p)}
	inst.Addr = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(inst.HostPort))
	t := time.Now()
	if err := k.waitReady(ctx, p, inst.Addr, s); err != nil {
		return runtime.Instance{}, &runtime.StartError{Step: runtime.StepReady, Name: p.Name, ContainerID: id, Err: err, LogTail: k.logTail(ctx, p.Name, 20)}
	}
	inst.Timings.Ready = time.Since(t)
	return inst, nil
}

// StartSandbox creates a pod from s that reaches nothing (deny-all egress
// policy, no DNS), labelled as the conversation's sandbox, and waits until
// it runs. A leftover sandbox pod is deleted first.
func (k *Kube) StartSandbox(ctx context.Context, s runtime.Spec) (string, error) {
	s, err := runtime.PrepareSpec(s)
	name := runtime.SandboxName(s.ConversationID)
	if err != nil {
		return "", fmt.Errorf("start sandbox %s: %w", name, err)
	}
	if err := k.deletePod(ctx, name, 0); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return "", fmt.Errorf("start sandbox %s: remove the leftover: %w", name, err)
	}
	if err := k.ensurePolicy(ctx, s); err != nil {
		return "", &runtime.StartError{Step: runtime.StepCreate, Name: name, Err: err}
	}
	cctx, cancel := call(ctx)
	p, err := k.cs.CoreV1().Pods(k.ns).Create(cctx, k.PodFor(s, runtime.RoleSandbox), metav1.CreateOptions{})
	cancel()
	if err != nil {
		return "", &runtime.StartError{Step: runtime.StepCreate, Name: name, Err: k.wrap("create pod", name, err)}
	}
	id := ID(p)
	if _, err = k.waitRunning(ctx, p, s); err != nil {
		return "", k.failStart(ctx, runtime.StepStart, id, nil, err)
	}
	return id, nil
}
