package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// TestPodFor checks the pod a Spec becomes, without a cluster: pinned to
// the node, the Docker runtime's labels, every mount a hostPath at the
// same path, the hardening fields, small requests under the limits,
// imagePullPolicy Never, no token; and, without network, no DNS.
func TestPodFor(t *testing.T) {
	k := &Kube{ns: "ns", node: "node-a"}
	s, err := runtime.PrepareSpec(runtime.Spec{
		ConversationID: "0b8f8f4e-6d1a-4c55-9b55-1c1f4f0c9d3a", ServerID: "srv", Image: "img:1", UID: 1000, GID: 1001,
		Mounts:    []runtime.Mount{{Source: "/w/t", Target: "/w/t"}, {Source: "/run/b", Target: "/ohd", ReadOnly: true}},
		Env:       []string{"A=b=c"},
		NoNetwork: true, ReadOnlyRootfs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := k.PodFor(s, "")
	if p.Name != "ohd-0b8f8f4e6d1a" || p.Namespace != "ns" || p.Spec.NodeName != "node-a" {
		t.Errorf("name %s ns %s node %s", p.Name, p.Namespace, p.Spec.NodeName)
	}
	for k, v := range map[string]string{runtime.LabelServer: "srv", runtime.LabelConversation: s.ConversationID, runtime.LabelInnerPort: "8000", runtime.LabelNetwork: "none"} {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	c := p.Spec.Containers[0]
	sc := c.SecurityContext
	if *sc.RunAsUser != 1000 || *sc.RunAsGroup != 1001 || *sc.AllowPrivilegeEscalation || *sc.Privileged || !*sc.ReadOnlyRootFilesystem ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("security context %+v", sc)
	}
	if c.ImagePullPolicy != corev1.PullNever || *p.Spec.AutomountServiceAccountToken || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pull %s token %v restart %s", c.ImagePullPolicy, *p.Spec.AutomountServiceAccountToken, p.Spec.RestartPolicy)
	}
	if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC {
		t.Error("host namespaces")
	}
	if p.Spec.DNSPolicy != corev1.DNSNone {
		t.Errorf("dns policy %s without network", p.Spec.DNSPolicy)
	}
	if got := c.Resources.Limits.Memory().Value(); got != runtime.DefaultMemoryBytes {
		t.Errorf("memory limit %d", got)
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 2000 {
		t.Errorf("cpu limit %dm", got)
	}
	if c.Resources.Requests.Cpu().Cmp(*c.Resources.Limits.Cpu()) >= 0 {
		t.Error("the CPU request is the limit: a small node would hold one conversation")
	}
	if c.Env[0].Name != "A" || c.Env[0].Value != "b=c" {
		t.Errorf("env %v", c.Env)
	}
	paths := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		paths[m.MountPath] = m
	}
	for _, v := range p.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		var m corev1.VolumeMount
		for _, vm := range c.VolumeMounts {
			if vm.Name == v.Name {
				m = vm
			}
		}
		switch v.HostPath.Path {
		case "/w/t":
			if m.MountPath != "/w/t" || m.ReadOnly {
				t.Errorf("worktree mount %+v", m)
			}
		case "/run/b":
			if m.MountPath != "/ohd" || !m.ReadOnly {
				t.Errorf("broker mount %+v", m)
			}
		default:
			t.Errorf("unexpected hostPath %s", v.HostPath.Path)
		}
	}
	if m, ok := paths["/tmp"]; !ok || m.ReadOnly {
		t.Error("no writable /tmp under the read-only root")
	}
	if sb := k.PodFor(s, runtime.RoleSandbox); sb.Labels[runtime.LabelRole] != runtime.RoleSandbox || sb.Labels[runtime.LabelInnerPort] != "" || sb.Name != "ohd-0b8f8f4e6d1a-sandbox" {
		t.Errorf("sandbox pod %s labels %v", sb.Name, sb.Labels)
	}
	if np := k.PolicyFor(s); len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != "Egress" {
		t.Errorf("policy %+v", np.Spec)
	}
}
