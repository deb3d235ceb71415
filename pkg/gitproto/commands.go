package gitproto

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Command is one ref update of a push: Old and New are object ids in
// lower-case hex (all zeros for "none"), Ref the full ref name.
type Command struct {
	Old, New, Ref string
}

// IsCreate reports whether the command creates Ref (Old is all zeros).
func (c Command) IsCreate() bool { return isZero(c.Old) }

// IsDelete reports whether the command deletes Ref (New is all zeros).
func (c Command) IsDelete() bool { return isZero(c.New) }

func isZero(id string) bool { return strings.Trim(id, "0") == "" }

// CommandList is what a client sends git-receive-pack before the pack:
// optional shallow lines, the commands with the capabilities of the first
// line, and the push options when the client asked for them.
type CommandList struct {
	Shallow     []string
	Commands    []Command
	Caps        []string
	PushOptions []string
}

// Has reports whether the client asked for capability name (a bare name,
// or "name=value").
func (l *CommandList) Has(name string) bool {
	for _, c := range l.Caps {
		if c == name || strings.HasPrefix(c, name+"=") {
			return true
		}
	}
	return false
}

// ErrTooLarge is returned by ReadCommandList when the command list is
// longer than its bound.
var ErrTooLarge = errors.New("git protocol: receive-pack command list over the size limit")

// ErrPushCert is returned by ReadCommandList for a signed push: its
// certificate carries the commands in a form the relay does not check.
var ErrPushCert = errors.New("git protocol: signed pushes (push-cert) are not supported")

// ReadCommandList reads a receive-pack request's command list from r,
// reading no byte beyond it, and returns it with the exact bytes read, so
// that a caller can forward them followed by the rest of r (the pack).
// A lone flush (git's probe before a large push) is a list of no
// commands. More than max bytes is ErrTooLarge; a push certificate is
// ErrPushCert; a line that is not "old new ref", an object id that is
// not 40 or 64 hex digits (one length for all), a ref name git itself
// would refuse, or a delim or response-end pkt is an error wrapping
// ErrSyntax; input that ends early is io.ErrUnexpectedEOF.
func ReadCommandList(r io.Reader, max int64) (*CommandList, []byte, error) {
	rec := &recorder{r: r, left: max}
	pr := NewReader(rec)
	l := &CommandList{}
	idLen := 0
	for {
		k, p, err := pr.Read()
		if err != nil {
			return nil, nil, rec.fail(err)
		}
		if k == Flush {
			break
		}
		if k != Data {
			return nil, nil, fmt.Errorf("%w: unexpected special pkt-line in the command list", ErrSyntax)
		}
		p = bytes.TrimSuffix(p, []byte("\n"))
		if len(l.Commands) == 0 {
			if rest, ok := bytes.CutPrefix(p, []byte("shallow ")); ok {
				if !validID(string(rest)) {
					return nil, nil, fmt.Errorf("%w: shallow line with an invalid object id", ErrSyntax)
				}
				l.Shallow = append(l.Shallow, string(rest))
				continue
			}
			if bytes.HasPrefix(p, []byte("push-cert\x00")) || bytes.Equal(p, []byte("push-cert")) {
				return nil, nil, ErrPushCert
			}
			cmd, caps, hasCaps := bytes.Cut(p, []byte{0})
			if hasCaps {
				for c := range strings.FieldsSeq(string(caps)) {
					l.Caps = append(l.Caps, c)
				}
			}
			p = cmd
		} else if bytes.IndexByte(p, 0) >= 0 {
			return nil, nil, fmt.Errorf("%w: NUL in a command after the first", ErrSyntax)
		}
		c, err := parseCommand(p)
		if err != nil {
			return nil, nil, err
		}
		if idLen == 0 {
			idLen = len(c.Old)
		}
		if len(c.Old) != idLen || len(c.New) != idLen {
			return nil, nil, fmt.Errorf("%w: object ids of different lengths", ErrSyntax)
		}
		l.Commands = append(l.Commands, c)
	}
	if len(l.Commands) == 0 {
		// git's probe before a large push (remote-curl's probe_rpc): a
		// lone flush, after which receive-pack reads nothing more.
		if len(l.Shallow) > 0 {
			return nil, nil, fmt.Errorf("%w: shallow lines without commands", ErrSyntax)
		}
		return l, rec.buf.Bytes(), nil
	}
	if l.Has("push-options") {
		for {
			k, p, err := pr.Read()
			if err != nil {
				return nil, nil, rec.fail(err)
			}
			if k == Flush {
				break
			}
			if k != Data {
				return nil, nil, fmt.Errorf("%w: unexpected special pkt-line in the push options", ErrSyntax)
			}
			l.PushOptions = append(l.PushOptions, string(bytes.TrimSuffix(p, []byte("\n"))))
		}
	}
	return l, rec.buf.Bytes(), nil
}

func parseCommand(p []byte) (Command, error) {
	f := strings.Split(string(p), " ")
	if len(f) != 3 {
		return Command{}, fmt.Errorf("%w: a command must be \"old new ref\"", ErrSyntax)
	}
	if !validID(f[0]) || !validID(f[1]) {
		return Command{}, fmt.Errorf("%w: invalid object id in a command", ErrSyntax)
	}
	if !ValidRefName(f[2]) {
		return Command{}, fmt.Errorf("%w: invalid ref name %q", ErrSyntax, printable([]byte(truncate(f[2], 80))))
	}
	return Command{Old: f[0], New: f[1], Ref: f[2]}, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func validID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidRefName reports whether name is a ref a push may name: "refs/"
// and components as git's check-ref-format demands (no component starting
// with "." or ending with ".lock", no "..", "@{", "//", control
// characters, space, ~ ^ : ? * [ or \, not ending with "/" or "."), at
// most 1024 bytes.
func ValidRefName(name string) bool {
	if len(name) > 1024 || !strings.HasPrefix(name, "refs/") || name == "refs/" {
		return false
	}
	if strings.Contains(name, "..") || strings.Contains(name, "@{") || strings.Contains(name, "//") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	for comp := range strings.SplitSeq(name, "/") {
		if comp == "" || comp[0] == '.' || strings.HasSuffix(comp, ".lock") {
			return false
		}
	}
	return true
}

// recorder keeps the bytes read through it, at most left of them.
type recorder struct {
	r    io.Reader
	buf  bytes.Buffer
	left int64
	over bool
}

func (rc *recorder) Read(p []byte) (int, error) {
	if rc.left <= 0 {
		rc.over = true
		return 0, ErrTooLarge
	}
	if int64(len(p)) > rc.left {
		p = p[:rc.left]
	}
	n, err := rc.r.Read(p)
	rc.left -= int64(n)
	rc.buf.Write(p[:n])
	return n, err
}

func (rc *recorder) fail(err error) error {
	if rc.over {
		return ErrTooLarge
	}
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
