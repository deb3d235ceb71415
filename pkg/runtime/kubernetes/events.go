package kubernetes

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// podState is what Events remembers of a pod to tell what changed.
type podState struct {
	running bool
	died    bool
}

// Events follows the pods labelled with serverID and calls fn with the
// Docker runtime's actions: "create" for a new pod, "start" when its agent
// container runs, "oom" then "die" when the kernel killed it for memory
// or the kubelet evicted it, "die" (with the exit code) when it
// otherwise ended, "destroy" when the pod is gone from the API. A broken
// watch is resumed from the last version seen, after a backoff; when that
// version is too old, the pods are listed again and an ActionResync event
// tells the receiver to reconcile with List. It returns nil when ctx ends.
func (k *Kube) Events(ctx context.Context, serverID string, fn func(runtime.Event)) error {
	sel := serverSelector(serverID)
	known := map[types.UID]*podState{}
	rv := ""
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		if rv == "" {
			cctx, cancel := call(ctx)
			l, err := k.cs.CoreV1().Pods(k.ns).List(cctx, metav1.ListOptions{LabelSelector: sel})
			cancel()
			if err != nil {
				if !sleep(ctx, backoff) {
					return nil
				}
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			seen := map[types.UID]bool{}
			for i := range l.Items {
				p := &l.Items[i]
				seen[p.UID] = true
				c := container(p)
				known[p.UID] = &podState{running: c.Running, died: c.State == "exited"}
			}
			for uid := range known {
				if !seen[uid] {
					delete(known, uid)
				}
			}
			rv = l.ResourceVersion
			if !first {
				fn(runtime.Event{Action: runtime.ActionResync, Time: time.Now()})
			}
			first = false
		}
		w, err := k.cs.CoreV1().Pods(k.ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if k.onWatch != nil {
			k.onWatch()
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // too old: list again and resync
				break
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			if ev.Type == watch.Bookmark || p.Labels[runtime.LabelServer] != serverID {
				continue
			}
			k.podEvents(p, ev.Type, known, fn)
		}
		w.Stop()
	}
	return nil
}

// podEvents turns one watch event of p into the runtime's events.
func (k *Kube) podEvents(p *corev1.Pod, t watch.EventType, known map[types.UID]*podState, fn func(runtime.Event)) {
	c := container(p)
	ev := func(action string, code int) {
		fn(runtime.Event{ContainerID: c.ID, ConversationID: c.ConversationID, Action: action, ExitCode: code, Time: time.Now()})
	}
	st := known[p.UID]
	if st == nil {
		st = &podState{}
		known[p.UID] = st
		if t == watch.Added {
			ev("create", 0)
		}
	}
	if c.Running && !st.running {
		st.running = true
		ev("start", 0)
	}
	if c.State == "exited" && !st.died {
		st.died = true
		if c.OOMKilled {
			ev("oom", 0)
		}
		ev("die", c.ExitCode)
	}
	if t == watch.Deleted {
		if !st.died {
			// Deleted while it ran (a kubectl delete, a drain): its
			// processes ended with it.
			ev("die", 137)
		}
		delete(known, p.UID)
		ev("destroy", 0)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
