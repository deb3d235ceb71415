//go:build !linux && !darwin

package peercred

func getFD(int) (Cred, error) { return Cred{}, ErrUnsupported }

type osWatcher struct{}

func newOSWatcher(int, Cred) (osWatcher, error) { return osWatcher{}, ErrUnsupported }
func (osWatcher) isAlive() error                { return ErrUnsupported }
func (osWatcher) close() error                  { return nil }
