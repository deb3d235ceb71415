package runtime

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

// ShortID is how ohd names a container in messages: the first 12
// characters of an engine ID, a name ("ohd-...") whole.
func ShortID(id string) string { return shortID(id) }
