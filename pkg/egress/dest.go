package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPort is the port of a destination given without one.
const DefaultPort = 443

// maxHostLen bounds a host name (DNS allows 253 characters).
const maxHostLen = 253

// ErrInvalidDest is returned (wrapped) by ParseDest and ParseTarget for
// text that is not a destination.
var ErrInvalidDest = errors.New("invalid destination")

// Dest is a granted destination.
type Dest struct {
	// Host is the lower-case host name, or an IP literal in canonical
	// form (no brackets). For a wildcard it is the domain after "*.".
	Host string
	// Wildcard says Host is a domain whose hosts (not Host itself) match.
	Wildcard bool
	// Port is 1-65535.
	Port uint16
	// IP is set when Host is an IP literal.
	IP netip.Addr
}

// String returns the destination in the form ParseDest reads, always with
// its port.
func (d Dest) String() string {
	h := d.Host
	if d.Wildcard {
		h = "*." + h
	}
	return net.JoinHostPort(h, strconv.Itoa(int(d.Port)))
}

// ParseDest parses a grant: HOST[:PORT], *.DOMAIN[:PORT], IPv4[:PORT] or
// [IPv6][:PORT]. The port defaults to DefaultPort.
func ParseDest(s string) (Dest, error) {
	d, err := parse(s, true)
	if err != nil {
		return Dest{}, fmt.Errorf("%w %q: %v; use HOST[:PORT] (port 443 when absent), *.example.com[:PORT] or IP:PORT", ErrInvalidDest, s, err)
	}
	return d, nil
}

// Target is a destination a client asked for: one host (no wildcard) and
// a port.
type Target struct {
	Host string // lower case; an IP literal in canonical form
	Port uint16
	IP   netip.Addr // set when Host is an IP literal
}

// String returns "host:port" (brackets around IPv6).
func (t Target) String() string { return net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port))) }

// ParseTarget parses a CONNECT authority "host:port" (the port is
// required: a proxy client always sends it).
func ParseTarget(s string) (Target, error) {
	if _, _, err := net.SplitHostPort(s); err != nil {
		return Target{}, fmt.Errorf("%w %q: want host:port", ErrInvalidDest, s)
	}
	d, err := parse(s, false)
	if err != nil {
		return Target{}, fmt.Errorf("%w %q: %v", ErrInvalidDest, s, err)
	}
	return Target{Host: d.Host, Port: d.Port, IP: d.IP}, nil
}

func parse(s string, wildcardOK bool) (Dest, error) {
	if s == "" {
		return Dest{}, errors.New("empty")
	}
	if len(s) > maxHostLen+8 {
		return Dest{}, errors.New("too long")
	}
	host, port := s, uint16(DefaultPort)
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 || p[0] == '0' || p[0] == '+' {
			return Dest{}, fmt.Errorf("port %q is not 1-65535", p)
		}
		if strings.HasPrefix(s, "[") {
			if ip, err := netip.ParseAddr(h); err != nil || !ip.Is6() {
				return Dest{}, errors.New("only an IPv6 address goes in brackets")
			}
		}
		host, port = h, uint16(n)
	} else if strings.Contains(s, "]") || strings.Count(s, ":") == 1 {
		return Dest{}, errors.New("malformed host:port")
	}
	if host == "" {
		return Dest{}, errors.New("no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return Dest{}, errors.New("an IPv6 zone is not allowed")
		}
		ip = ip.Unmap()
		return Dest{Host: ip.String(), Port: port, IP: ip}, nil
	}
	if strings.Contains(host, ":") {
		return Dest{}, errors.New("an IPv6 address needs brackets: [ADDR]:PORT")
	}
	wild := false
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if !wildcardOK {
			return Dest{}, errors.New("a wildcard is not a host")
		}
		wild, host = true, rest
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if err := checkName(host); err != nil {
		return Dest{}, err
	}
	if wild && !strings.Contains(host, ".") {
		return Dest{}, errors.New("a wildcard needs a domain of two labels or more (*.example.com)")
	}
	return Dest{Host: host, Wildcard: wild, Port: port}, nil
}

// checkName accepts DNS names of letters, digits, '-' and '_' in labels of
// 1-63 characters not starting or ending with '-'.
func checkName(h string) error {
	if h == "" || len(h) > maxHostLen {
		return errors.New("host name must be 1-253 characters")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("label %q must be 1-63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host %q has a character %q outside a-z 0-9 - _", h, c)
			}
		}
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return fmt.Errorf("%q is an address with a trailing dot: write it without", h)
	}
	// "1.2.3" or "0x7f.1" would be read as addresses by some resolvers.
	last := h[strings.LastIndexByte(h, '.')+1:]
	if allDigitsOrHex(last) {
		return fmt.Errorf("host %q looks like a malformed IP address", h)
	}
	return nil
}

func allDigitsOrHex(s string) bool {
	if strings.HasPrefix(s, "0x") {
		s = s[2:]
		for i := 0; i < len(s); i++ {
			if !strings.ContainsRune("0123456789abcdef", rune(s[i])) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Matches reports whether d grants target t by name: same port, and the
// same host, or a host below d's domain for a wildcard.
func (d Dest) Matches(t Target) bool {
	if d.Port != t.Port {
		return false
	}
	if d.Wildcard {
		return t.IP == (netip.Addr{}) && strings.HasSuffix(t.Host, "."+d.Host)
	}
	return d.Host == t.Host
}

// NamesAddr reports whether d names exactly addr (an IP grant with that
// port).
func (d Dest) NamesAddr(addr netip.AddrPort) bool {
	return d.IP.IsValid() && d.IP == addr.Addr().Unmap() && d.Port == addr.Port()
}

// NoProxyHosts are the hosts a container's clients reach directly, not
// through the broker's proxy (its NO_PROXY): the container's own
// loopback, where the broker relay listens.
const NoProxyHosts = "127.0.0.1,localhost"

// LoopbackHint says how a client in the container reaches d when d is on
// the host's loopback, or "" for any other destination. The container's
// NO_PROXY (NoProxyHosts) sends 127.0.0.1 and localhost to the
// container's own loopback, so such a grant (a local model server on the
// host, say) is reached only by naming the proxy explicitly.
func LoopbackHint(d Dest) string {
	loop := d.Host == "localhost" || d.IP.IsValid() && d.IP.Unmap().IsLoopback()
	if !loop || d.Wildcard {
		return ""
	}
	return "net grant " + d.String() + " is on the host's loopback, but inside the container " + d.Host +
		" is the container's own (NO_PROXY=" + NoProxyHosts + " sends it there, past the broker): a client reaches the host's " + d.String() +
		" only through the broker's proxy named explicitly, e.g. curl -x \"$HTTP_PROXY\" http://" + d.String() + "/ (Python: proxies={\"http\": os.environ[\"HTTP_PROXY\"]})"
}
