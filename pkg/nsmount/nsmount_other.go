//go:build !linux

package nsmount

func bindIn(int, []Mount) error { return ErrUnsupported }
