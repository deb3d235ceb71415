package daemon

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a size as `ohd serve --memory` takes it: a number of
// bytes, or a number with a unit as Docker writes them, all binary and
// case-insensitive: b; k, kb, kib (1024); m, mb, mib; g, gb, gib; t, tb,
// tib. "4g" and "4GiB" are 4 GiB, "512m" is 512 MiB, "1.5g" is 1.5 GiB.
// The result is a positive whole number of bytes.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], t[i:]
	mult, ok := sizeUnits[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("size %q: want a number of bytes or a number with a unit (k, m, g, t; e.g. 4g or 512m)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("size %q: %q is not a positive number", s, num)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if v < 1 || v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return int64(v), nil
}

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// FormatSize writes n in ParseSize's syntax with the largest unit that
// divides it (4g, 512m, 100).
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n > 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
