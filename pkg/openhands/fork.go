package openhands

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Fork (ref §10; the agent server's conversation_router.py
// fork_conversation and LocalConversation.fork): POST
// /api/conversations/{id}/fork {"id", "title", "tags", "reset_metrics",
// "from_event_id"} makes a new conversation holding the source's events up
// to from_event_id, written under the server's conversations path as any
// other (meta.json with forked_from_conversation_id and
// forked_from_event_id, base_state.json, events/). Under ohd the fork is a
// conversation of its own, in its own container: the source's inner server
// writes it, and ohd moves its files to the fork's own inner state before
// the fork's container starts (its server loads its catalog from disk at
// start-up, ref §5), rewritten by a ForkMove.

// ForkRequestFields are the fields of the agent server's
// ForkConversationRequest (models.py).
var ForkRequestFields = []string{"id", "title", "tags", "reset_metrics", "from_event_id"}

// MaxForkTitle is ForkConversationRequest.title's max_length.
const MaxForkTitle = 200

// ForkMove says how a fork's persisted state changes owner: every string
// of its meta.json and base_state.json naming the source (a relay URL of
// one of its mediated credentials, a host path of its own) names the
// fork's instead, and every Fernet token the source's inner server sealed
// (Old, its OH_SECRET_KEY) is sealed again for the fork's (New). Events
// are history and are copied as they are.
type ForkMove struct {
	// From and To are the two conversations' ids.
	From, To string
	// Old and New are the two inner servers' ciphers; nil Old: tokens are
	// copied as they are.
	Old, New *Fernet
	// Relay is the broker relay's base URL as the inner server knows it
	// ("http://127.0.0.1:8751"): <Relay>/{llm,secrets,mcp}/<From>.<name>
	// becomes <Relay>/.../<To>.<name>, the names store.CopyScoped gives.
	Relay string
	// Paths are host path prefixes to replace, old then new (the source's
	// inner state and working directory).
	Paths [][2]string
}

// maxForkFiles and maxForkBytes bound what one fork copies.
const (
	maxForkFiles = 200_000
	maxForkBytes = 4 << 30
)

// CopyForkState copies the conversation state under srcRoot/rel... (the
// source's <conversations>/<fork hex>, written by its inner server) into
// dst (the fork's own <conversations>/<fork hex>, which must not exist),
// owned by uid:gid when ohd runs as root: meta.json and base_state.json
// rewritten by mv, the other regular files and those of events/ as they
// are. The source's directories belong to its agent, so nothing is
// followed through a symlink and only regular files are read (each at most
// 64 MiB, 4 GiB and 200,000 files in all); anything else is skipped.
func CopyForkState(srcRoot string, rel []string, dst string, uid, gid int, mv ForkMove) error {
	dirfd, err := openDirNoFollow(srcRoot, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNoState
		}
		return err
	}
	defer unix.Close(dirfd)
	src := filepath.Join(append([]string{srcRoot}, rel...)...)
	if _, err := readObject(dirfd, src, MetaFile); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNoState
		}
		return err
	}
	if err := mkdirOwned(dst, uid, gid); err != nil {
		return err
	}
	n, size := 0, int64(0)
	var copyDir func(fd int, from, to string, top bool) error
	copyDir = func(fd int, from, to string, top bool) error {
		names, err := readDirNames(fd)
		if err != nil {
			return fmt.Errorf("openhands: fork: read %s: %w", from, err)
		}
		for _, name := range names {
			if top && name == EventsDir {
				sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue // not a directory, or a symlink: skipped
				}
				err = mkdirOwned(filepath.Join(to, name), uid, gid)
				if err == nil {
					err = copyDir(sub, filepath.Join(from, name), filepath.Join(to, name), false)
				}
				unix.Close(sub)
				if err != nil {
					return err
				}
				continue
			}
			b, ok, err := readRegular(fd, filepath.Join(from, name))
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if n++; n > maxForkFiles {
				return fmt.Errorf("openhands: fork: more than %d files under %s", maxForkFiles, src)
			}
			if size += int64(len(b)); size > maxForkBytes {
				return fmt.Errorf("openhands: fork: more than %d bytes under %s", int64(maxForkBytes), src)
			}
			if top && (name == MetaFile || name == BaseStateFile) {
				if b, err = mv.rewrite(b); err != nil {
					return fmt.Errorf("openhands: fork: %s: %w", name, err)
				}
			}
			if err := writeNewFile(filepath.Join(to, name), b, uid, gid); err != nil {
				return err
			}
		}
		return nil
	}
	return copyDir(dirfd, src, dst, true)
}

// readDirNames lists the directory open at fd (without closing it).
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// readRegular reads the regular file name of dirfd (never through a
// symlink, never blocking on a FIFO); ok is false for anything else.
func readRegular(dirfd int, path string) ([]byte, bool, error) {
	fd, err := unix.Openat(dirfd, filepath.Base(path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, nil
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, false, nil
	}
	b, err := io.ReadAll(&limitReader{f: f, n: maxStateFile})
	if err != nil {
		return nil, false, fmt.Errorf("openhands: fork: read %s: %w", path, err)
	}
	return b, true, nil
}

func mkdirOwned(dir string, uid, gid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("openhands: fork: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(dir, uid, gid); err != nil {
			return fmt.Errorf("openhands: fork: %w", err)
		}
	}
	return nil
}

func writeNewFile(path string, b []byte, uid, gid int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("openhands: fork: %w", err)
	}
	_, werr := f.Write(b)
	if werr == nil && os.Geteuid() == 0 {
		werr = f.Chown(uid, gid)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("openhands: fork: write %s: %w", path, werr)
	}
	return nil
}

// rewrite applies mv to every string of the JSON document b.
func (mv ForkMove) rewrite(b []byte) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // integers stay exact
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	v, err := mv.walk(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func (mv ForkMove) walk(v any) (any, error) {
	switch t := v.(type) {
	case string:
		return mv.str(t)
	case map[string]any:
		for k, x := range t {
			y, err := mv.walk(x)
			if err != nil {
				return nil, err
			}
			t[k] = y
		}
	case []any:
		for i, x := range t {
			y, err := mv.walk(x)
			if err != nil {
				return nil, err
			}
			t[i] = y
		}
	}
	return v, nil
}

// str rewrites one string: a token the source's cipher opens is opened,
// rewritten and sealed for the fork (its plaintext cleared); a token it
// does not open is kept (the server drops what it cannot open, ref §1).
func (mv ForkMove) str(s string) (string, error) {
	if IsToken(s) && mv.Old != nil && mv.New != nil {
		plain, err := mv.Old.Decrypt(s)
		if err != nil {
			return s, nil
		}
		out := []byte(mv.plain(string(plain)))
		clear(plain)
		tok, err := mv.New.Encrypt(out)
		clear(out)
		return tok, err
	}
	return mv.plain(s), nil
}

// Relay URL kinds a conversation's mediated credentials are named under
// (Mediator: LLM profiles, secrets, MCP servers).
var relayKinds = []string{"llm", "secrets", "mcp"}

func (mv ForkMove) plain(s string) string {
	if mv.Relay != "" && mv.From != "" && strings.Contains(s, mv.Relay) {
		for _, k := range relayKinds {
			s = strings.ReplaceAll(s, mv.Relay+"/"+k+"/"+mv.From+".", mv.Relay+"/"+k+"/"+mv.To+".")
		}
	}
	for _, p := range mv.Paths {
		if p[0] == "" || p[0] == p[1] {
			continue
		}
		if s == p[0] {
			return p[1]
		}
		if rest, ok := strings.CutPrefix(s, strings.TrimSuffix(p[0], "/")+"/"); ok {
			return strings.TrimSuffix(p[1], "/") + "/" + rest
		}
	}
	return s
}
