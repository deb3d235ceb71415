package openhands

import (
	"strconv"
	"strings"
)

// ContractVersion is the agent server version whose API ohd implements:
// the release the reference was read from and measured against (ref,
// "Sources": SDK@v1.43.1). ohd's /server_info answers it as "version"
// (its own version goes beside it as "ohd_version"), because clients
// check that field against the agent server's releases (ref §10: the
// newest Canvas wants x.y.z >= MinClientVersion).
const ContractVersion = "1.43.1"

// MinClientVersion is the oldest agent server version the newest Agent
// Canvas accepts (ref §10, assertAgentServerVersionIsSupported).
const MinClientVersion = "1.28.0"

// AcceptedVersion reports whether v is a version Agent Canvas accepts:
// x.y.z (digits only, an optional leading "v" refused as Canvas refuses
// it) at least MinClientVersion.
func AcceptedVersion(v string) bool {
	got, ok := parseSemver(v)
	if !ok {
		return false
	}
	min, _ := parseSemver(MinClientVersion)
	for i := range got {
		if got[i] != min[i] {
			return got[i] > min[i]
		}
	}
	return true
}

func parseSemver(v string) ([3]int, bool) {
	var out [3]int
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" || len(p) > 9 {
			return out, false
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return out, false
		}
		out[i] = n
	}
	return out, true
}
