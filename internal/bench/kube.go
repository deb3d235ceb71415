package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/runtime/kubernetes"
)

// KubeOptions configure Kube.
type KubeOptions struct {
	// Iterations is the number of measured create/remove cycles per side
	// (default 5).
	Iterations int
	// Image is the conversation image, already on the node.
	Image string
	// Kubeconfig, Namespace and Node name the cluster; "" reads
	// KUBECONFIG, OHD_KUBE_NAMESPACE and OHD_KUBE_NODE (scripts/kube/up
	// writes them to its env file).
	Kubeconfig, Namespace, Node string
	// CRISocket is the node's CRI socket, where the image's entrypoint is
	// read; "" reads OHD_KUBE_CONTAINERD, else containerd's default.
	CRISocket string
	Logger    *slog.Logger
}

// KubeConfigured says whether the environment names a cluster for Kube.
func KubeConfigured() bool {
	return os.Getenv("KUBECONFIG") != "" && os.Getenv("OHD_KUBE_NAMESPACE") != "" && os.Getenv("OHD_KUBE_NODE") != ""
}

// Kube measures a conversation's pod created and removed by the
// kubernetes runtime (Start: create, running, health 200 at the pod's IP;
// Remove: delete and wait until gone) against the same pod created and
// deleted through the API directly, with the same waits, alternating in
// the same run. Op is "kube-create-remove", its steps "create" and
// "remove".
func Kube(ctx context.Context, opts KubeOptions) ([]CreateResult, error) {
	if opts.Iterations <= 0 {
		opts.Iterations = 5
	}
	env := func(v, name string) string {
		if v != "" {
			return v
		}
		return os.Getenv(name)
	}
	ko := kubernetes.Options{
		Kubeconfig: env(opts.Kubeconfig, "KUBECONFIG"), Namespace: env(opts.Namespace, "OHD_KUBE_NAMESPACE"),
		Node: env(opts.Node, "OHD_KUBE_NODE"), Logger: opts.Logger,
	}
	sock := env(opts.CRISocket, "OHD_KUBE_CONTAINERD")
	if sock == "" {
		sock = kubernetes.DefaultCRISocket
	}
	ko.ImageConfig = kubernetes.CRIImageConfig(sock)
	k, err := kubernetes.New(ctx, ko)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	img, err := k.ResolveImage(ctx, opts.Image)
	if err != nil {
		return nil, err
	}
	server := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	spec := func(i int) runtime.Spec {
		s := runtime.Spec{
			ConversationID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), ServerID: server, Image: img.ID,
			UID: 1000, GID: 1000, Env: []string{"STANDIN_ADDR=0.0.0.0:8000", "OH_CONVERSATIONS_PATH=/tmp/conversations"},
			Entrypoint: img.Entrypoint, Cmd: img.Cmd,
			Resources:    runtime.Resources{MemoryBytes: 256 << 20, NanoCPUs: 1_000_000_000},
			ReadyTimeout: 2 * time.Minute,
		}
		if len(s.Entrypoint) == 0 {
			s.Entrypoint, s.Cmd = img.Cmd, nil
		}
		s, _ = runtime.PrepareSpec(s)
		return s
	}
	ohdSide := func(i int) (stepSample, error) {
		smp := stepSample{steps: map[string]time.Duration{}}
		t0 := time.Now()
		inst, err := k.Start(ctx, spec(i))
		if err != nil {
			return smp, err
		}
		smp.steps["create"] = time.Since(t0)
		t1 := time.Now()
		if err := k.Remove(ctx, inst.ContainerID); err != nil {
			return smp, err
		}
		smp.steps["remove"] = time.Since(t1)
		smp.total = time.Since(t0)
		return smp, nil
	}
	cs := k.Clientset()
	ns := k.Namespace()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	rawSide := func(i int) (stepSample, error) {
		smp := stepSample{steps: map[string]time.Duration{}}
		s := spec(i)
		pod := k.PodFor(s, "")
		pod.Name = fmt.Sprintf("ohd-bench-raw-%d", i)
		t0 := time.Now()
		p, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return smp, err
		}
		ip := ""
		if err := rawWait(ctx, cs.CoreV1().Pods(ns), p.Name, func(p *corev1.Pod) bool {
			for _, st := range p.Status.ContainerStatuses {
				if st.State.Running != nil && p.Status.PodIP != "" {
					ip = p.Status.PodIP
					return true
				}
			}
			return false
		}); err != nil {
			return smp, err
		}
		url := "http://" + net.JoinHostPort(ip, strconv.Itoa(s.InnerPort)) + s.HealthPath
		for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
			if resp, err := hc.Get(url); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			select {
			case <-ctx.Done():
				return smp, ctx.Err()
			case <-time.After(delay):
			}
		}
		smp.steps["create"] = time.Since(t0)
		t1 := time.Now()
		grace := int64(1)
		if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			return smp, err
		}
		if err := rawWait(ctx, cs.CoreV1().Pods(ns), p.Name, func(p *corev1.Pod) bool { return p == nil }); err != nil {
			return smp, err
		}
		smp.steps["remove"] = time.Since(t1)
		smp.total = time.Since(t0)
		return smp, nil
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		zero := int64(0)
		_ = cs.CoreV1().Pods(ns).DeleteCollection(cctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{LabelSelector: runtime.LabelServer + "=" + server})
	}()
	// One warm-up cycle each (the node's first pod of an image is slower).
	if _, err := ohdSide(opts.Iterations); err != nil {
		return nil, fmt.Errorf("kube warm-up (ohd): %w", err)
	}
	if _, err := rawSide(opts.Iterations); err != nil {
		return nil, fmt.Errorf("kube warm-up (API): %w", err)
	}
	var ohd, raw []stepSample
	for i := range opts.Iterations {
		sides := []func(int) (stepSample, error){ohdSide, rawSide}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for j, side := range sides {
			smp, err := side(i)
			if err != nil {
				return nil, fmt.Errorf("kube iteration %d: %w", i+1, err)
			}
			if (j == 0) == (i%2 == 0) {
				ohd = append(ohd, smp)
			} else {
				raw = append(raw, smp)
			}
		}
	}
	steps := []string{"create", "remove"}
	r := CreateResult{Op: "kube-create-remove", Iterations: opts.Iterations, Steps: steps,
		OHD: breakdown(ohd, steps), Baseline: breakdown(raw, steps)}
	if r.Baseline.Total.Median > 0 {
		r.Ratio = float64(r.OHD.Total.Median) / float64(r.Baseline.Total.Median)
	}
	return []CreateResult{r}, nil
}

type podWatcher interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// rawWait waits, with a watch of its own, until done(pod) (nil once
// gone).
func rawWait(ctx context.Context, pods podWatcher, name string, done func(*corev1.Pod) bool) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		p, err := pods.Get(wctx, name, metav1.GetOptions{})
		var cur *corev1.Pod
		if err == nil {
			cur = p
		} else if !isNotFound(err) {
			return err
		}
		if done(cur) {
			return nil
		}
		rv := ""
		if cur != nil {
			rv = cur.ResourceVersion
		}
		w, err := pods.Watch(wctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				break
			}
			if ev.Type == watch.Deleted {
				p = nil
			}
			if done(p) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if wctx.Err() != nil {
			return fmt.Errorf("pod %s: %w", name, wctx.Err())
		}
	}
}

func isNotFound(err error) bool {
	var se interface{ Status() metav1.Status }
	return errors.As(err, &se) && se.Status().Code == http.StatusNotFound
}
