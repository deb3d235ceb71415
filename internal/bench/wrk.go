package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// The "wrk" mode of the proxy benchmark drives the same GET as "http"
// with wrk (Debian's package wrk), a lean C client: the Go client shares
// the 2 cores with ohd and the inner server and flatters the ratio.

// ensureWrk finds wrk, installing Debian's package when it is missing and
// this process may (root with apt-get).
func ensureWrk(ctx context.Context) (string, error) {
	if p, err := exec.LookPath("wrk"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("wrk is not installed: apt-get install wrk (or leave the wrk mode out)")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", errors.New("wrk is not installed and there is no apt-get: install wrk")
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends wrk")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install wrk: %v\n%s", err, out)
	}
	return exec.LookPath("wrk")
}

var (
	wrkTotal  = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m)\b`)
	wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkP99    = regexp.MustCompile(`(?m)^\s+99%\s+([\d.]+)(us|ms|s)\s*$`)
)

// parseWrk reads wrk's summary: requests, the time they took, errors
// and (with --latency) the p99.
func parseWrk(out string) (sample, time.Duration, error) {
	var s sample
	m := wrkTotal.FindStringSubmatch(out)
	if m == nil {
		return s, 0, fmt.Errorf("wrk printed no summary:\n%s", out)
	}
	s.n, _ = strconv.Atoi(m[1])
	s.elapsed = wrkDur(m[2], m[3])
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		n, _ := strconv.Atoi(m[1])
		s.errors += n
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.Atoi(v)
			s.errors += n
		}
	}
	var p99 time.Duration
	if m := wrkP99.FindStringSubmatch(out); m != nil {
		p99 = wrkDur(m[1], m[2])
	}
	return s, p99, nil
}

func wrkDur(v, unit string) time.Duration {
	f, _ := strconv.ParseFloat(v, 64)
	mult := map[string]float64{"us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9}[unit]
	return time.Duration(f * mult)
}

// proxyDriveWrk drives GET echo requests with wrk for d (whole seconds,
// at least 1), with clients connections on 2 threads; with netns (a
// /proc/<pid>/ns/net path) wrk runs in that network namespace (nsenter).
func proxyDriveWrk(ctx context.Context, wrk, netns, addr, key string, clients int, d time.Duration) (sample, time.Duration, error) {
	secs := int(math.Max(1, math.Round(d.Seconds())))
	args := []string{"-t2", "-c" + strconv.Itoa(clients), "-d" + strconv.Itoa(secs) + "s", "--timeout", "10s", "--latency",
		"-H", "X-Session-API-Key: " + key, "http://" + addr + "/api/conversations/" + proxyBenchID + "/echo/bench"}
	name := wrk
	if netns != "" {
		name, args = "nsenter", append([]string{"--net=" + netns, "--", wrk}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return sample{}, 0, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	return parseWrk(string(out))
}
