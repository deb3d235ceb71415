package packaging

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeObjects decodes every document of the manifests in
// packaging/kubernetes with the API's own types, strictly: an unknown
// field or kind fails.
func kubeObjects(t *testing.T) []kruntime.Object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in packaging/kubernetes: %v", err)
	}
	dec := scheme.Codecs.UniversalDeserializer()
	var out []kruntime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, _, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

// TestKubeManifestsScope checks the DaemonSet and its RBAC: a
// ServiceAccount whose Role grants pods, pods/exec, pods/log and
// networkpolicies in ohd's namespace and nothing else (no ClusterRole,
// no binding outside it), and a DaemonSet that runs ohd serve --runtime
// kubernetes as that account with its node from the downward API and the
// state and worktree roots as hostPath volumes at the same paths.
func TestKubeManifestsScope(t *testing.T) {
	const ns = "ohd"
	var (
		sa    *corev1.ServiceAccount
		roles []*rbacv1.Role
		binds []*rbacv1.RoleBinding
		ds    *appsv1.DaemonSet
	)
	for _, o := range kubeObjects(t) {
		switch o := o.(type) {
		case *corev1.Namespace:
			if o.Name != ns {
				t.Errorf("namespace %q, want %q", o.Name, ns)
			}
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.Role:
			roles = append(roles, o)
		case *rbacv1.RoleBinding:
			binds = append(binds, o)
		case *appsv1.DaemonSet:
			ds = o
		default:
			t.Errorf("unexpected object %T (a ClusterRole or binding would reach past one namespace)", o)
		}
	}
	if sa == nil || ds == nil || len(roles) != 1 || len(binds) != 1 {
		t.Fatalf("want one ServiceAccount, Role, RoleBinding and DaemonSet; got sa %v, %d roles, %d bindings, ds %v", sa != nil, len(roles), len(binds), ds != nil)
	}
	allowed := map[string][]string{
		"/pods":                             {"create", "delete", "get", "list", "watch"},
		"/pods/exec":                        {"create", "get"},
		"/pods/log":                         {"get"},
		"networking.k8s.io/networkpolicies": {"create", "delete", "get", "list", "update"},
	}
	seen := map[string]bool{}
	for _, r := range roles[0].Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %v: resource names or URLs", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				want, ok := allowed[key]
				if !ok {
					t.Errorf("the Role grants %s, which ohd does not use", key)
					continue
				}
				seen[key] = true
				for _, v := range r.Verbs {
					if v == "*" || !slices.Contains(want, v) {
						t.Errorf("the Role grants %s on %s", v, key)
					}
				}
			}
		}
	}
	for key := range allowed {
		if !seen[key] {
			t.Errorf("the Role does not grant %s, which ohd needs", key)
		}
	}
	if roles[0].Namespace != ns || binds[0].Namespace != ns || sa.Namespace != ns || ds.Namespace != ns {
		t.Errorf("objects outside namespace %s: role %q binding %q sa %q ds %q", ns, roles[0].Namespace, binds[0].Namespace, sa.Namespace, ds.Namespace)
	}
	b := binds[0]
	if b.RoleRef.Kind != "Role" || b.RoleRef.Name != roles[0].Name {
		t.Errorf("the binding refers to %s %s, not the Role", b.RoleRef.Kind, b.RoleRef.Name)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != ns {
		t.Errorf("the binding's subjects are %v, want only ServiceAccount %s/%s", b.Subjects, ns, sa.Name)
	}

	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("the DaemonSet runs as %q, not %q", spec.ServiceAccountName, sa.Name)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"serve", "--runtime=kubernetes", "--kube-namespace=" + ns} {
		if !strings.Contains(args, want) {
			t.Errorf("ohd's arguments %q lack %s", args, want)
		}
	}
	help := ohdServeHelp(t)
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !help.flags[name] {
			t.Errorf("ohd's argument %q is not a flag `ohd serve --help` lists", a)
		}
	}
	nodeFromAPI := false
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeFromAPI = true
		}
	}
	if !nodeFromAPI {
		t.Error("NODE_NAME does not come from the downward API's spec.nodeName")
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		hp, ok := hostPaths[m.Name]
		if !ok {
			continue
		}
		if hp != m.MountPath {
			t.Errorf("hostPath %s is mounted at %s: ohd's paths must be the node's", hp, m.MountPath)
		}
		mounted[m.MountPath] = true
	}
	for _, flag := range []string{"--state-dir=", "--runtime-dir=", "--worktree-root=", "--workspace-root="} {
		for _, a := range c.Args {
			if p, ok := strings.CutPrefix(a, flag); ok && !underAny(p, mounted) {
				t.Errorf("%s%s is not under a hostPath mounted at its own path", flag, p)
			}
		}
	}
}

func underAny(p string, roots map[string]bool) bool {
	for r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// TestKubeManifestsOnCluster applies the manifests to the test cluster
// (make test-kube; OHD_KUBE=1): the namespace, account, Role and binding
// for real, the DaemonSet as a server-side dry run (the test cluster runs
// no controller to start its pods); then asks the API server, as ohd's
// ServiceAccount, what it may do: everything ohd does in its namespace,
// nothing in another.
func TestKubeManifestsOnCluster(t *testing.T) {
	kubeconfig := os.Getenv("KUBECONFIG")
	if os.Getenv("OHD_KUBE") != "1" || kubeconfig == "" {
		if os.Getenv("OHD_KUBE") == "1" {
			t.Fatal("OHD_KUBE=1 but KUBECONFIG is empty: run make test-kube")
		}
		t.Skip("no test cluster: make test-kube runs this (OHD_KUBE=1, KUBECONFIG)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(o kruntime.Object, dry bool) error {
		opts := metav1.CreateOptions{}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var err error
		switch o := o.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, opts)
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
		default:
			t.Fatalf("no create for %T", o)
		}
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	objs := kubeObjects(t)
	for _, o := range objs {
		if _, ok := o.(*corev1.Namespace); ok {
			if err := create(o, false); err != nil {
				t.Fatalf("create %T: %v", o, err)
			}
		}
	}
	for _, o := range objs {
		_, isNS := o.(*corev1.Namespace)
		_, isDS := o.(*appsv1.DaemonSet)
		if isNS {
			continue
		}
		if err := create(o, isDS); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	can := func(ns, verb, group, resource, sub string) bool {
		t.Helper()
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:ohd:ohd",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ohd", "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: group, Resource: resource, Subresource: sub,
			},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, c := range []struct{ verb, group, res, sub string }{
		{"create", "", "pods", ""}, {"delete", "", "pods", ""}, {"watch", "", "pods", ""},
		{"create", "", "pods", "exec"}, {"get", "", "pods", "log"},
		{"create", "networking.k8s.io", "networkpolicies", ""},
	} {
		if !can("ohd", c.verb, c.group, c.res, c.sub) {
			t.Errorf("ohd's account may not %s %s/%s in namespace ohd", c.verb, c.res, c.sub)
		}
		if can("default", c.verb, c.group, c.res, c.sub) {
			t.Errorf("ohd's account may %s %s/%s in namespace default", c.verb, c.res, c.sub)
		}
	}
	for _, c := range []struct{ ns, verb, group, res string }{
		{"ohd", "get", "", "secrets"}, {"ohd", "create", "apps", "daemonsets"}, {"", "get", "", "nodes"}, {"", "list", "", "namespaces"},
	} {
		if can(c.ns, c.verb, c.group, c.res, "") {
			t.Errorf("ohd's account may %s %s (namespace %q)", c.verb, c.res, c.ns)
		}
	}
}
