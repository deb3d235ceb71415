package daemon

import (
	"context"
	"time"

	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/runtime/kubernetes"
)

// kubeRuntime connects the kubernetes runtime (--runtime kubernetes). The
// Kubernetes API does not expose an image's entrypoint, which ohd wraps:
// it is read from the node's Docker engine when one answers (the images
// of a node built and loaded there); without one, creates fail saying so.
func (d *Daemon) kubeRuntime(ctx context.Context, opts runtime.DockerOptions) (runtime.Runtime, error) {
	ko := kubernetes.Options{
		Kubeconfig: d.cfg.Kube.Kubeconfig, Namespace: d.cfg.Kube.Namespace, Node: d.cfg.Kube.Node,
		PullImages: d.cfg.Kube.PullImages, PolicyEnforced: d.cfg.Kube.PolicyEnforced, Logger: d.log,
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	docker, err := runtime.NewDocker(pctx, opts)
	cancel()
	if err == nil {
		d.imageEngine = docker
		ko.ImageConfig = docker.ResolveImage
	} else {
		d.log.Warn("no Docker engine on this node: the kubernetes runtime cannot read image entrypoints, so conversations cannot be created", "err", err)
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
