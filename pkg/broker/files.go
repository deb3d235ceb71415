package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// The file layout, with who may change what:
//
//	<RuntimeDir>/conversations/        0711 ohd    (only ohd adds or removes entries)
//	<RuntimeDir>/conversations/.s*/    0700 ohd    staging, short-lived
//	<RuntimeDir>/conversations/<id>/   0700 uid:gid
//	    broker.sock                    0600 uid:gid
//	    token                          0400 uid:gid
//
// A conversation's uid owns its directory and could put a symlink at
// broker.sock or token. So ohd never chmods or chowns a path in that
// directory: it creates the socket and the token file in a staging
// directory only it can write, sets their mode and owner there, and
// renames them into place. rename(2) replaces whatever entry is there
// (socket, file or symlink) without following it, and does so atomically:
// a container that bind-mounted the directory sees either the old socket
// or the new one, never none.

// ensureRoot creates <RuntimeDir>/conversations (0711) and checks it is a
// directory of ours.
func (b *Broker) ensureRoot() error {
	if err := os.MkdirAll(b.root, 0o711); err != nil {
		return fmt.Errorf("create %s: %w", b.root, err)
	}
	fi, err := os.Lstat(b.root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", b.root)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to ohd (uid %d)", b.root, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o711 {
		if err := os.Chmod(b.root, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// prepareDir creates the conversation directory or adopts an existing one
// (keeping its inode), mode 0700, owned by uid:gid.
func (b *Broker) prepareDir(dir string, uid, gid int) error {
	if err := b.ensureRoot(); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// The parent is ours (0711), so the entry cannot be swapped under us
	// between these calls.
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	return chown(dir, fi, uid, gid)
}

// stage returns a fresh staging directory next to the conversation
// directories (same filesystem, so rename works), writable only by ohd.
func (b *Broker) stage() (string, error) {
	if err := b.ensureRoot(); err != nil {
		return "", err
	}
	d, err := os.MkdirTemp(b.root, ".s")
	if err != nil {
		return "", fmt.Errorf("create staging dir: %w", err)
	}
	return d, nil
}

// writeToken writes the token of id at epoch into its directory: 0400,
// owned by uid:gid, replaced atomically.
func (b *Broker) writeToken(id string, epoch uint64, uid, gid int) error {
	dir := b.endpoint(id).Dir
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("conversation directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	stage, err := b.stage()
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	tmp := filepath.Join(stage, TokenName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o400)
	if err != nil {
		return fmt.Errorf("create token file: %w", err)
	}
	tok := Token(b.key, id, epoch)
	err = func() error {
		if err := f.Chmod(0o400); err != nil {
			return err
		}
		if uid != os.Geteuid() || gid != os.Getegid() {
			if err := f.Chown(uid, gid); err != nil {
				return err
			}
		}
		if _, err := f.WriteString(tok); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, TokenName)); err != nil {
		return fmt.Errorf("install token file: %w", err)
	}
	return nil
}

// listen binds a socket in a staging directory, sets its mode and owner
// there and renames it to socket, replacing a stale one.
func (b *Broker) listen(socket string, uid, gid int) (*net.UnixListener, error) {
	stage, err := b.stage()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	tmp := filepath.Join(stage, SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// The socket file moves: Close must not unlink by its old name, and
	// Shutdown leaves it (stale) for the next ohd to replace.
	ln.SetUnlinkOnClose(false)
	err = func() error {
		if err := os.Chmod(tmp, 0o600); err != nil {
			return err
		}
		fi, err := os.Lstat(tmp)
		if err != nil {
			return err
		}
		if err := chown(tmp, fi, uid, gid); err != nil {
			return err
		}
		return os.Rename(tmp, socket)
	}()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("install socket: %w", err)
	}
	return ln, nil
}

// chown sets the owner of path (never following a symlink) unless it is
// already right, so a non-root ohd works for its own uid.
func chown(path string, fi fs.FileInfo, uid, gid int) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("chown %d:%d: %w", uid, gid, err)
	}
	return nil
}

func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
