package runtime

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
)

func TestContainerName(t *testing.T) {
	tests := []struct{ id, want string }{
		{"2b1b65f6-d4ed-42ed-84e6-1f55f7cfaede", "ohd-2b1b65f6d4ed"},
		{"2B1B65F6-D4ED-42ED-84E6-1F55F7CFAEDE", "ohd-2b1b65f6d4ed"},
		{"2b1b65f6d4ed42ed84e61f55f7cfaede", "ohd-2b1b65f6d4ed"},
		{"short", "ohd-short"},
		{"../../etc/passwd", "ohd-etcpasswd"},
		{"", "ohd-"},
	}
	for _, tt := range tests {
		if got := ContainerName(tt.id); got != tt.want {
			t.Errorf("ContainerName(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestHostnameOf(t *testing.T) {
	tests := []struct{ id, want string }{
		{"2b1b65f6-d4ed-42ed-84e6-1f55f7cfaede", "ohd-2b1b65f6d4ed42ed84e61f55f7cfaede"},
		{"2B1B65F6-D4ED-42ED-84E6-1F55F7CFAEDE", "ohd-2b1b65f6d4ed42ed84e61f55f7cfaede"},
		{"../../etc/passwd", "ohd-etcpasswd"},
		{strings.Repeat("a", 100), "ohd-" + strings.Repeat("a", 59)},
	}
	for _, tt := range tests {
		if got := HostnameOf(tt.id); got != tt.want {
			t.Errorf("HostnameOf(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

// dockerName is the engine's rule for container names.
var dockerName = regexp.MustCompile(`^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func FuzzContainerName(f *testing.F) {
	f.Add("2b1b65f6-d4ed-42ed-84e6-1f55f7cfaede")
	f.Add("ÄÖ-ü/..\x00")
	f.Fuzz(func(t *testing.T, id string) {
		name := ContainerName(id)
		if !strings.HasPrefix(name, "ohd-") || len(name) > 16 {
			t.Fatalf("ContainerName(%q) = %q, want ohd- and at most 12 more", id, name)
		}
		if name != "ohd-" && !dockerName.MatchString(name) {
			t.Fatalf("ContainerName(%q) = %q, not a valid container name", id, name)
		}
	})
}

func TestFloating(t *testing.T) {
	tests := []struct {
		ref  string
		want bool
	}{
		{"ohd-agent", true},
		{"ohd-agent:latest", true},
		{"ohd-agent:", true},
		{"ohd-agent:1.2", false},
		{"ghcr.io/openhands/agent-server:1.0.0-python", false},
		{"ghcr.io/openhands/agent-server", true},
		{"localhost:5000/agent", true}, // the colon is the registry's port
		{"localhost:5000/agent:v1", false},
		{"agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
		{"agent:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
	}
	for _, tt := range tests {
		if got := Floating(tt.ref); got != tt.want {
			t.Errorf("Floating(%q) = %v, want %v", tt.ref, got, tt.want)
		}
	}
}

func FuzzFloating(f *testing.F) {
	f.Add("ghcr.io/openhands/agent-server:1.0.0")
	f.Add("localhost:5000/agent")
	f.Add("a@sha256:00")
	f.Fuzz(func(t *testing.T, ref string) {
		got := Floating(ref)
		// Pinning by digest always wins; an explicit non-latest tag pins.
		if got && strings.Contains(ref, "@") {
			t.Fatalf("Floating(%q) = true for a digest reference", ref)
		}
		if !strings.Contains(ref, "@") && !strings.Contains(ref, "/") && !strings.Contains(ref, ":") && !got {
			t.Fatalf("Floating(%q) = false for a bare name", ref)
		}
	})
}

func TestIsImageID(t *testing.T) {
	id := "sha256:9d148724bd602612855e07ce705ef775786efc2d1b5950107acb4dcba718372f"
	tests := []struct {
		ref  string
		want bool
	}{
		{id, true},
		{strings.TrimPrefix(id, "sha256:"), true},
		{"9d148724bd60", true},
		{"9d148724bd6", false}, // too short to be taken as an ID
		{"ohd-agent:dev", false},
	}
	for _, tt := range tests {
		if got := isImageID(tt.ref, id); got != tt.want {
			t.Errorf("isImageID(%q) = %v, want %v", tt.ref, got, tt.want)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	good := Spec{ConversationID: "2b1b65f6-d4ed-42ed-84e6-1f55f7cfaede", ServerID: "s", Image: "img", UID: 1000, GID: 1000}
	tests := []struct {
		name string
		edit func(*Spec)
		want string // "" = valid
	}{
		{"good", func(*Spec) {}, ""},
		{"no conversation", func(s *Spec) { s.ConversationID = "--" }, "conversation id"},
		{"no server", func(s *Spec) { s.ServerID = "" }, "server id"},
		{"no image", func(s *Spec) { s.Image = "" }, "image"},
		{"negative uid", func(s *Spec) { s.UID = -1 }, "negative"},
		{"bad port", func(s *Spec) { s.InnerPort = 70000 }, "inner port"},
		{"relative health path", func(s *Spec) { s.HealthPath = "health" }, "health path"},
		{"tiny memory", func(s *Spec) { s.Resources.MemoryBytes = 1 << 20 }, "memory"},
		{"relative mount", func(s *Spec) { s.Mounts = []Mount{{Source: "repo", Target: "/repo"}} }, "absolute"},
		{"mount over root", func(s *Spec) { s.Mounts = []Mount{{Source: "/x", Target: "/"}} }, "over /"},
		{"mount over tmpfs", func(s *Spec) {
			s.ReadOnlyRootfs = true
			s.Mounts = []Mount{{Source: "/x", Target: "/tmp/"}}
		}, "tmpfs"},
		{"env without =", func(s *Spec) { s.Env = []string{"A=1", "sk-secret-value"} }, "entry 1"},
		{"reserved label", func(s *Spec) { s.Labels = map[string]string{"dev.ohd.server": "x"} }, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.edit(&s)
			err := s.withDefaults().validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("validate() = %v, want nil", err)
			case tt.want != "" && (!errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("validate() = %v, want ErrInvalidSpec mentioning %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "sk-secret-value") {
				t.Errorf("validate() = %v: the message quotes an environment value", err)
			}
		})
	}
}

func TestSpecDefaults(t *testing.T) {
	got := Spec{ReadOnlyRootfs: true}.withDefaults()
	want := Spec{
		ReadOnlyRootfs: true, TmpSize: 1 << 30, InnerPort: 8000, HealthPath: "/health", ReadyTimeout: time.Minute,
		Resources: Resources{MemoryBytes: 4 << 30, NanoCPUs: 2e9, PidsLimit: 512},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("withDefaults (-want +got):\n%s", diff)
	}
	d := &Docker{ncpu: 1}
	s, err := d.prepare(Spec{ConversationID: "c", ServerID: "s", Image: "i"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Resources.NanoCPUs != 1e9 {
		t.Errorf("default CPUs on a 1-CPU engine = %d nano, want 1e9 (the engine refuses more)", s.Resources.NanoCPUs)
	}
	s, _ = (&Docker{ncpu: 4}).prepare(Spec{ConversationID: "c", ServerID: "s", Image: "i", Resources: Resources{NanoCPUs: 3e9}})
	if s.Resources.NanoCPUs != 3e9 {
		t.Errorf("explicit CPUs = %d nano, want 3e9 as given", s.Resources.NanoCPUs)
	}
}

// TestPrepareCapsConfiguredCPUs: ohd serve passes --cpus (default 2) as
// an explicit limit, so the cap to the engine's CPU count must apply to
// a configured value too: the engine refuses more, and every create on a
// 1-CPU host would fail. The cap is logged once.
func TestPrepareCapsConfiguredCPUs(t *testing.T) {
	var log strings.Builder
	d := &Docker{ncpu: 1, log: slog.New(slog.NewTextHandler(&log, nil))}
	for _, nano := range []int64{DefaultNanoCPUs, 3e9} {
		s, err := d.prepare(Spec{ConversationID: "c", ServerID: "s", Image: "i", Resources: Resources{NanoCPUs: nano}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Resources.NanoCPUs != 1e9 {
			t.Errorf("configured %d nano CPUs on a 1-CPU engine = %d, want 1e9 (the engine refuses more)", nano, s.Resources.NanoCPUs)
		}
	}
	if n := strings.Count(log.String(), "CPU limit is above the engine's CPU count"); n != 1 {
		t.Errorf("the cap was logged %d times, want once:\n%s", n, log.String())
	}
	s, _ := d.prepare(Spec{ConversationID: "c", ServerID: "s", Image: "i", Resources: Resources{NanoCPUs: 5e8}})
	if s.Resources.NanoCPUs != 5e8 {
		t.Errorf("configured 0.5 CPUs = %d nano, want 5e8 as given", s.Resources.NanoCPUs)
	}
}

func TestStartErrorMessage(t *testing.T) {
	err := error(&StartError{
		Step: StepReady, Name: "ohd-2b1b65f6d4ed", ContainerID: "abc", Exited: true, ExitCode: 3,
		LogTail: "line one\nline two\n", Removed: true, Err: &exitedError{code: 3},
	})
	want := "start container ohd-2b1b65f6d4ed: ready: the container exited with code 3 before it was ready\n" +
		"container output (last lines):\n  | line one\n  | line two"
	if err.Error() != want {
		t.Errorf("Error() =\n%s\nwant\n%s", err, want)
	}
	if !errors.Is(err, ErrExited) {
		t.Errorf("errors.Is(%v, ErrExited) = false", err)
	}
}

func TestLogConfigFor(t *testing.T) {
	tests := []struct {
		driver, max string
		want        container.LogConfig
	}{
		{"json-file", "", container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "3"}}},
		{"local", "50m", container.LogConfig{Type: "local", Config: map[string]string{"max-size": "50m", "max-file": "3"}}},
		{"json-file", "-", container.LogConfig{}},
		{"journald", "", container.LogConfig{}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, logConfigFor(tt.driver, tt.max)); diff != "" {
			t.Errorf("logConfigFor(%q, %q) (-want +got):\n%s", tt.driver, tt.max, diff)
		}
	}
}

func TestPublishedPort(t *testing.T) {
	b := func(ip, port string) network.PortBinding {
		var a netip.Addr
		if ip != "" {
			a = netip.MustParseAddr(ip)
		}
		return network.PortBinding{HostIP: a, HostPort: port}
	}
	tests := []struct {
		name string
		ns   *container.NetworkSettings
		want int
	}{
		{"nil", nil, 0},
		{"loopback", &container.NetworkSettings{Ports: network.PortMap{innerPort(8000): {b("127.0.0.1", "32768")}}}, 32768},
		{"public only", &container.NetworkSettings{Ports: network.PortMap{innerPort(8000): {b("0.0.0.0", "32768")}}}, 0},
		{"other port", &container.NetworkSettings{Ports: network.PortMap{innerPort(9000): {b("127.0.0.1", "32768")}}}, 0},
		{"not yet bound", &container.NetworkSettings{Ports: network.PortMap{innerPort(8000): nil}}, 0},
	}
	for _, tt := range tests {
		if got := publishedPort(tt.ns, 8000); got != tt.want {
			t.Errorf("publishedPort(%s) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestLocal(t *testing.T) {
	l := NewLocal()
	ctx := context.Background()
	if l.Kind() != "local" {
		t.Errorf("Kind() = %q, want local", l.Kind())
	}
	inst, err := l.Start(ctx, Spec{ConversationID: "c"})
	if err != nil || inst != (Instance{}) {
		t.Errorf("Start = %+v, %v; want an empty Instance", inst, err)
	}
	if list, err := l.List(ctx, "s"); err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v; want empty", list, err)
	}
	if _, err := l.Exec(ctx, "", []string{"true"}, ExecOptions{}); !errors.Is(err, ErrNoContainer) {
		t.Errorf("Exec = %v, want ErrNoContainer", err)
	}
	if err := l.Logs(ctx, "", false, nil, nil); !errors.Is(err, ErrNoContainer) {
		t.Errorf("Logs = %v, want ErrNoContainer", err)
	}
	if _, err := l.Inspect(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inspect = %v, want ErrNotFound", err)
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := l.Events(ectx, "s", func(Event) { t.Error("local runtime delivered an event") }); err != nil {
		t.Errorf("Events = %v, want nil when its context ends", err)
	}
}
