package egress_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/egress"
)

func TestParseDest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"example.com", "example.com:443"},
		{"Example.COM.", "example.com:443"},
		{"example.com:8080", "example.com:8080"},
		{"*.example.com", "*.example.com:443"},
		{"*.example.com:80", "*.example.com:80"},
		{"10.0.0.7:8080", "10.0.0.7:8080"},
		{"1.2.3.4", "1.2.3.4:443"},
		{"[fd00::1]:22", "[fd00::1]:22"},
		{"[::ffff:127.0.0.1]:80", "127.0.0.1:80"},
		{"git_host.internal", "git_host.internal:443"},
	} {
		d, err := egress.ParseDest(tc.in)
		if err != nil {
			t.Errorf("ParseDest(%q) = %v, want %s", tc.in, err, tc.want)
			continue
		}
		if got := d.String(); got != tc.want {
			t.Errorf("ParseDest(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{
		"", ":443", "example.com:", "example.com:0", "example.com:65536", "example.com:+1", "example.com:080",
		"exa mple.com", "example.com/path", "http://example.com", "*.com", "*", "*.", "a.*.example.com",
		"-bad.example.com", "bad-.example.com", "[fe80::1%eth0]:443", "fe80::1%eth0", "1.2.3", "0x7f.1",
		"[example.com]:443", "example..com", strings.Repeat("a", 64) + ".com", "user@example.com",
	} {
		if d, err := egress.ParseDest(in); err == nil {
			t.Errorf("ParseDest(%q) = %s, want an error", in, d)
		} else if !errors.Is(err, egress.ErrInvalidDest) {
			t.Errorf("ParseDest(%q) error %v is not ErrInvalidDest", in, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	if _, err := egress.ParseTarget("example.com"); err == nil {
		t.Error("ParseTarget without a port succeeded")
	}
	if _, err := egress.ParseTarget("*.example.com:443"); err == nil {
		t.Error("ParseTarget of a wildcard succeeded")
	}
	tg, err := egress.ParseTarget("API.example.com:443")
	if err != nil || tg.String() != "api.example.com:443" {
		t.Errorf("ParseTarget = %v, %v", tg, err)
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		grant, target string
		want          bool
	}{
		{"example.com", "example.com:443", true},
		{"example.com", "example.com:80", false},
		{"example.com:80", "example.com:80", true},
		{"example.com", "www.example.com:443", false},
		{"*.example.com", "www.example.com:443", true},
		{"*.example.com", "a.b.example.com:443", true},
		{"*.example.com", "example.com:443", false},
		{"*.example.com", "evilexample.com:443", false},
		{"*.example.com", "example.com.evil.net:443", false},
		{"10.0.0.7:8080", "10.0.0.7:8080", true},
		{"10.0.0.7:8080", "10.0.0.7:8081", false},
	} {
		g, err := egress.ParseDest(tc.grant)
		if err != nil {
			t.Fatal(err)
		}
		tg, err := egress.ParseTarget(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Matches(tg); got != tc.want {
			t.Errorf("ParseDest(%q).Matches(%q) = %v, want %v", tc.grant, tc.target, got, tc.want)
		}
	}
}

func TestBlockedEveryRange(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("2001:db8::9"),
		netip.MustParseAddr("172.17.0.1"), netip.MustParseAddr("127.0.0.1")}
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", "loopback"}, {"127.255.255.254", "loopback"}, {"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"}, {"64:ff9b::7f00:1", "loopback"},
		{"10.0.0.1", "private"}, {"10.255.255.255", "private"},
		{"172.16.0.1", "private"}, {"172.31.255.255", "private"},
		{"192.168.0.1", "private"}, {"192.168.255.255", "private"},
		{"fc00::1", "private"}, {"fd12:3456::1", "private"},
		{"100.64.0.1", "cgnat"}, {"100.127.255.255", "cgnat"},
		{"169.254.0.1", "link_local"}, {"169.254.255.255", "link_local"}, {"fe80::1", "link_local"},
		{"169.254.169.254", "metadata"}, {"fd00:ec2::254", "metadata"},
		{"0.0.0.0", "unspecified"}, {"0.1.2.3", "unspecified"}, {"::", "unspecified"},
		{"224.0.0.1", "multicast"}, {"239.255.255.250", "multicast"}, {"ff02::1", "multicast"},
		{"255.255.255.255", "reserved"}, {"240.0.0.1", "reserved"}, {"198.18.0.1", "reserved"},
		{"203.0.113.9", "host_address"}, {"172.17.0.1", "host_address"}, {"172.17.0.2", "private"}, {"2001:db8::9", "host_address"}, {"::ffff:203.0.113.9", "host_address"},
		// Public addresses, and the neighbours of each range.
		{"8.8.8.8", ""}, {"1.1.1.1", ""}, {"2606:4700::1111", ""},
		{"11.0.0.1", ""}, {"172.15.255.255", ""}, {"172.32.0.0", ""}, {"192.167.255.255", ""},
		{"192.169.0.0", ""}, {"100.63.255.255", ""}, {"100.128.0.0", ""}, {"169.253.255.255", ""},
		{"fbff::1", ""}, {"fec0::1", "reserved"}, {"126.255.255.255", ""}, {"128.0.0.0", ""},
		{"223.255.255.255", ""}, {"203.0.113.10", ""},
	} {
		if got := egress.Blocked(netip.MustParseAddr(tc.addr), own); got != tc.want {
			t.Errorf("Blocked(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// fakeResolver answers from a map: the policy's resolver is an interface
// for this unit test only; the daemon always uses the host's resolver.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestCheck(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	p := &egress.Policy{
		Resolver: fakeResolver{
			"public.test":   addrs("93.184.216.34"),
			"mixed.test":    addrs("127.0.0.1", "93.184.216.35"),
			"loop.test":     addrs("127.0.0.1"),
			"a.wild.test":   addrs("10.1.2.3"),
			"b.wild.test":   addrs("93.184.216.36"),
			"meta.test":     addrs("169.254.169.254"),
			"selfhost.test": addrs("203.0.113.9"),
		},
		OwnAddrs: func() ([]netip.Addr, error) { return addrs("203.0.113.9"), nil },
	}
	grants, err := egress.ParseDests([]string{"public.test", "mixed.test", "loop.test:8080", "*.wild.test",
		"meta.test:80", "selfhost.test", "127.0.0.1:9000", "10.9.9.9:443", "nxdomain.test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ target, want, reason string }{
		{"public.test:443", "93.184.216.34:443", ""},
		{"public.test:80", "", "not_granted"},
		{"other.test:443", "", "not_granted"},
		{"mixed.test:443", "93.184.216.35:443", ""},
		{"loop.test:8080", "", "loopback"},
		{"a.wild.test:443", "", "private"},
		{"b.wild.test:443", "93.184.216.36:443", ""},
		{"wild.test:443", "", "not_granted"},
		{"meta.test:80", "", "metadata"},
		{"selfhost.test:443", "", "host_address"},
		{"127.0.0.1:9000", "127.0.0.1:9000", ""},
		{"127.0.0.1:9001", "", "not_granted"},
		{"10.9.9.9:443", "10.9.9.9:443", ""},
		{"169.254.169.254:80", "", "not_granted"},
		{"nxdomain.test:443", "", "resolve_failed"},
	} {
		tg, err := egress.ParseTarget(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Check(context.Background(), grants, tg)
		var ref *egress.Refusal
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("Check(%s) = %v, want %s", tc.target, err, tc.want)
		case tc.reason == "" && got.String() != tc.want:
			t.Errorf("Check(%s) = %s, want %s", tc.target, got, tc.want)
		case tc.reason != "" && !errors.As(err, &ref):
			t.Errorf("Check(%s) = %v, %v; want refusal %s", tc.target, got, err, tc.reason)
		case tc.reason != "" && ref.Reason != tc.reason:
			t.Errorf("Check(%s) refused for %s (%s), want %s", tc.target, ref.Reason, ref.Msg, tc.reason)
		case tc.reason != "" && tc.reason != "resolve_failed" && (!strings.Contains(ref.Msg, "ohctl grant ID net") || strings.Contains(ref.Msg, "\n")):
			t.Errorf("Check(%s) message %q does not name the grant command on one line", tc.target, ref.Msg)
		}
	}
}

// TestCheckRealResolver: a granted name the host resolves (through
// /etc/hosts) to a loopback address is refused.
func TestCheckRealResolver(t *testing.T) {
	var p egress.Policy
	g, _ := egress.ParseDests([]string{"localhost:8080"})
	tg, _ := egress.ParseTarget("localhost:8080")
	_, err := p.Check(context.Background(), g, tg)
	var ref *egress.Refusal
	if !errors.As(err, &ref) || ref.Reason != "loopback" {
		t.Fatalf("Check(localhost:8080) = %v, want a loopback refusal", err)
	}
}

func FuzzParseDest(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:80", "[::1]:443", "10.0.0.1:22", "a:b:c", "*.", "[", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := egress.ParseDest(s)
		if err != nil {
			return
		}
		if d.Port == 0 || d.Host == "" {
			t.Fatalf("ParseDest(%q) = %+v: no port or host", s, d)
		}
		// The canonical form parses to the same destination.
		d2, err := egress.ParseDest(d.String())
		if err != nil || d2 != d {
			t.Fatalf("ParseDest(%q) = %s, which parses to %+v, %v", s, d, d2, err)
		}
		if !d.Wildcard {
			tg, err := egress.ParseTarget(d.String())
			if err != nil || !d.Matches(tg) {
				t.Fatalf("ParseTarget(%s) = %+v, %v; does not match its grant", d, tg, err)
			}
		}
	})
}
