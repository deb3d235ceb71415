package nsmount

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// probeEnv runs the test binary as a probe instead of its tests (the
// integration suite runs it under ohd.service's sandbox): "pid|path" binds
// path onto itself in pid's mount namespace and prints "probe: ok".
const probeEnv = "OHD_TEST_NSMOUNT_PROBE"

func TestMain(m *testing.M) {
	if v := os.Getenv(probeEnv); v != "" {
		os.Exit(probe(v))
	}
	os.Exit(m.Run())
}

func probe(v string) int {
	f := strings.Split(v, "|")
	pid, err := strconv.Atoi(f[0])
	if len(f) != 2 || err != nil {
		fmt.Printf("%s=%q: want pid|path\n", probeEnv, v)
		return 2
	}
	if err := Bind(pid, []Mount{{Source: f[1], Target: f[1]}, {Source: f[1], Target: f[1], ReadOnly: true}}); err != nil {
		fmt.Println("probe:", err)
		return 1
	}
	fmt.Println("probe: ok")
	return 0
}
