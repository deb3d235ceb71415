package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Resolver resolves a host name to addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Policy checks targets against grants. The zero value resolves with
// net.DefaultResolver and reads the host's addresses with
// net.InterfaceAddrs at each check (so an address added later counts).
type Policy struct {
	// Resolver resolves names on the host; nil means net.DefaultResolver
	// (which honours /etc/hosts).
	Resolver Resolver
	// OwnAddrs returns the host's own addresses; nil means the addresses
	// of every interface (net.InterfaceAddrs).
	OwnAddrs func() ([]netip.Addr, error)
}

// Refusal is a target the policy refuses.
type Refusal struct {
	// Reason is the audit reason: not_granted, resolve_failed, or a
	// Blocked reason (loopback, private, link_local, cgnat, metadata,
	// host_address, ...).
	Reason string
	// Msg is the one line the client is told.
	Msg string
}

func (r *Refusal) Error() string { return r.Msg }

// Check decides target t for a conversation with grants (the
// conversation's and the server's): it returns the one address to dial,
// or a *Refusal. A target is allowed when a grant matches it by name (or
// names its address and port), and the address it resolves to is not
// Blocked; a blocked address is allowed only when a grant names that exact
// IP:port.
func (p *Policy) Check(ctx context.Context, grants []Dest, t Target) (netip.AddrPort, error) {
	grantCmd := "ohctl grant ID net " + grantText(t)
	if !matchesAny(grants, t) {
		return netip.AddrPort{}, &Refusal{Reason: "not_granted",
			Msg: fmt.Sprintf("egress to %s is not granted to this conversation: on the host, run %s", t, grantCmd)}
	}
	var addrs []netip.Addr
	if t.IP.IsValid() {
		addrs = []netip.Addr{t.IP}
	} else {
		r := p.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		var err error
		addrs, err = r.LookupNetIP(ctx, "ip", t.Host)
		if err != nil || len(addrs) == 0 {
			return netip.AddrPort{}, &Refusal{Reason: "resolve_failed",
				Msg: fmt.Sprintf("egress to %s: the host cannot resolve %s", t, t.Host)}
		}
	}
	own, err := p.ownAddrs()
	if err != nil {
		return netip.AddrPort{}, &Refusal{Reason: "own_addresses",
			Msg: fmt.Sprintf("egress to %s: the host's own addresses cannot be read, so nothing is let through", t)}
	}
	var firstBlock string
	var firstAddr netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		ap := netip.AddrPortFrom(a, t.Port)
		why := Blocked(a, own)
		if why == "" || namesExactly(grants, ap) {
			return ap, nil
		}
		if firstBlock == "" {
			firstBlock, firstAddr = why, a
		}
	}
	ap := netip.AddrPortFrom(firstAddr, t.Port)
	return netip.AddrPort{}, &Refusal{Reason: firstBlock,
		Msg: fmt.Sprintf("egress to %s refused: it resolves to %s, a %s address; only a grant of that exact address reaches it: ohctl grant ID net %s",
			t, firstAddr, strings.ReplaceAll(firstBlock, "_", "-"), ap)}
}

func grantText(t Target) string {
	if t.Port == DefaultPort {
		if t.IP.Is6() {
			return "[" + t.Host + "]"
		}
		return t.Host
	}
	return t.String()
}

func matchesAny(grants []Dest, t Target) bool {
	for _, g := range grants {
		if g.Matches(t) {
			return true
		}
	}
	return false
}

func namesExactly(grants []Dest, ap netip.AddrPort) bool {
	for _, g := range grants {
		if g.NamesAddr(ap) {
			return true
		}
	}
	return false
}

func (p *Policy) ownAddrs() ([]netip.Addr, error) {
	if p.OwnAddrs != nil {
		return p.OwnAddrs()
	}
	return InterfaceAddrs()
}

// InterfaceAddrs returns the addresses of every interface of the host.
func InterfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pfx.Addr().Unmap())
		}
	}
	return out, nil
}

// ParseDests parses each grant with ParseDest, skipping none: the first
// invalid one is the error.
func ParseDests(ss []string) ([]Dest, error) {
	out := make([]Dest, 0, len(ss))
	for _, s := range ss {
		d, err := ParseDest(s)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
