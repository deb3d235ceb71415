package daemon

import (
	"context"
	"os"
	"time"

	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/runtime/kubernetes"
)

// kubeRuntime connects the kubernetes runtime (--runtime kubernetes). The
// Kubernetes API does not expose an image's entrypoint, which ohd wraps:
// it is read from the node's container runtime over the CRI
// (--kube-cri-socket), as the kubelet reads it; no Docker engine is needed
// on the node.
func (d *Daemon) kubeRuntime(ctx context.Context) (runtime.Runtime, error) {
	kubernetes.RouteClientLogs(d.log)
	ko := kubernetes.Options{
		Kubeconfig: d.cfg.Kube.Kubeconfig, Namespace: d.cfg.Kube.Namespace, Node: d.cfg.Kube.Node,
		PullImages: d.cfg.Kube.PullImages, PolicyEnforced: d.cfg.Kube.PolicyEnforced, Logger: d.log,
		ImageConfig:   kubernetes.CRIImageConfig(d.cfg.Kube.CRISocket),
		OnStep:        func(step string) { failpoint.Hit(dockerFailpoints[step]) },
		EngineTimeout: d.cfg.EngineTimeout,
	}
	if _, err := os.Stat(d.cfg.Kube.CRISocket); err != nil {
		d.log.Warn("the node's container runtime has no CRI socket here: the kubernetes runtime cannot read image entrypoints, so conversations cannot be created until it answers (--kube-cri-socket)", "err", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	k, err := kubernetes.New(cctx, ko)
	if err != nil {
		return nil, err
	}
	enforced, why := k.PolicyEnforcement(cctx)
	if enforced {
		d.log.Info("kubernetes runtime", "node", k.Node(), "namespace", k.Namespace(), "network_policy", why)
	} else {
		d.log.Warn("kubernetes runtime: "+why, "node", k.Node(), "namespace", k.Namespace())
	}
	return k, nil
}
