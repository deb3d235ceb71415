package runtime

import "context"

// PrepareSpec returns s with every zero field set to its default, or
// ErrInvalidSpec naming its first problem: what Docker.Start checks before
// it asks the engine for anything. Other backends (package
// runtime/kubernetes) start from it, so a Spec means the same everywhere.
func PrepareSpec(s Spec) (Spec, error) {
	s = s.withDefaults()
	return s, s.validate()
}

// PrepareReadiness is PrepareSpec for the fields Restart uses.
func PrepareReadiness(s Spec) (Spec, error) {
	s = s.withDefaults()
	return s, s.validateReadiness()
}

// DialOnly is implemented by runtimes whose containers are reached only
// through their NetnsOpener's dialer, never at 127.0.0.1:<HostPort> (a
// Kubernetes pod at its IP on the node): their Instances say NoNetwork.
type DialOnly interface {
	DialOnly() bool
}

// IsDialOnly says rt is a DialOnly runtime.
func IsDialOnly(rt Runtime) bool {
	d, ok := rt.(DialOnly)
	return ok && d.DialOnly()
}

// PolicyReporter is implemented by runtimes whose egress isolation in
// broker mode rests on something ohd may not be able to verify (a
// Kubernetes NetworkPolicy, enforced only by some network plugins).
// PolicyEnforcement says whether ohd knows it is enforced, and why or why
// not, in words for ohctl doctor and the create answer.
type PolicyReporter interface {
	PolicyEnforcement(ctx context.Context) (enforced bool, why string)
}
