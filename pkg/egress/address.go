package egress

import "net/netip"

// blockedRanges are the addresses a container never reaches by name or by
// address unless a grant names the exact IP:port. Each has the reason the
// audit log records.
var blockedRanges = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("fc00::/7"), "private"}, // ULA
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link_local"},
	{netip.MustParsePrefix("fe80::/10"), "link_local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // and 255.255.255.255
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "reserved"}, // local-use NAT64
	{netip.MustParsePrefix("fec0::/10"), "reserved"},      // deprecated site-local
}

// Blocked says why the broker refuses to dial a, or "" if a is a public
// address: loopback, private (RFC 1918, ULA fc00::/7), link-local
// (169.254.0.0/16, fe80::/10), CGNAT (100.64.0.0/10), the cloud metadata
// addresses, unspecified, multicast and reserved ranges, and any of own
// (the host's interface addresses; "host_address" also for one inside a
// private range, such as a bridge's gateway). An IPv4-mapped IPv6 address is judged
// as its IPv4 address; IPv4 embedded in the NAT64 prefix 64:ff9b::/96
// likewise.
func Blocked(a netip.Addr, own []netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		if v4, ok := nat64(a); ok {
			if r := Blocked(v4, own); r != "" {
				return r
			}
		}
	}
	why := ""
	for _, r := range blockedRanges {
		if r.p.Contains(a) {
			why = r.reason
			break
		}
	}
	switch why {
	case "loopback", "metadata", "unspecified", "multicast":
		return why
	}
	// A host address in a private range (a bridge's gateway) says what it
	// is: the host itself.
	for _, o := range own {
		if o.Unmap() == a {
			return "host_address"
		}
	}
	return why
}

var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

func nat64(a netip.Addr) (netip.Addr, bool) {
	if !nat64Prefix.Contains(a) {
		return netip.Addr{}, false
	}
	b := a.As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
}
