//go:build !linux && !darwin

package peercred

func getFD(int) (Cred, error) { return Cred{}, ErrUnsupported }
