package broker_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestRestart shuts a Broker down and opens the same conversation with a
// new Broker on the same runtime dir and key, as a restarted ohd does: the
// socket is back in the same directory (same inode, so a container's bind
// mount sees it) and the token the container already has still works.
func TestRestart(t *testing.T) {
	e := newEnv(t)
	conv := broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 7, Grants: broker.Grants{Secrets: []string{"s"}}}
	ep := e.open(conv)
	e.be.SetSecret("s", []byte("v-"+marker))
	tok, err := os.ReadFile(ep.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	dirIno := inode(t, ep.Dir)
	// A "container" holding the directory open, as a bind mount does.
	held, err := os.Open(ep.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	c := e.client(ep)
	if _, err := c.Whoami(context.Background()); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Whoami(context.Background()); err == nil {
		t.Fatal("the broker still answers after Shutdown")
	}
	if _, err := e.b.Open(context.Background(), conv); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Open after Shutdown = %v, want ErrClosed", err)
	}
	if _, err := os.Stat(ep.Dir); err != nil {
		t.Fatalf("Shutdown removed the directory: %v", err)
	}

	e.b = e.newBroker()
	ep2 := e.open(conv)
	if ep2 != ep {
		t.Errorf("Open after restart = %+v, want %+v", ep2, ep)
	}
	if got := inode(t, ep.Dir); got != dirIno {
		t.Errorf("directory inode %d after restart, want %d (the container mounted the old one)", got, dirIno)
	}
	// Through the directory the container holds.
	viaHeld := filepath.Join("/proc/self/fd", strconv.Itoa(int(held.Fd())), broker.SocketName)
	c2 := broker.NewClient(viaHeld, ep.TokenFile)
	defer c2.Close()
	w, err := c2.Whoami(context.Background())
	if err != nil {
		t.Fatalf("whoami through the held directory after restart: %v", err)
	}
	if w.ID != "conv-1" || w.Epoch != 7 {
		t.Errorf("whoami = %+v", w)
	}
	tok2, err := os.ReadFile(ep.TokenFile)
	if err != nil || string(tok2) != string(tok) {
		t.Errorf("token after restart = %q, %v; want the same token", tok2, err)
	}
	// The old token, presented directly.
	resp, _ := e.request(ep.Socket, "GET", "/v1/secrets/s", authed(strings.TrimSpace(string(tok))), nil)
	if resp.StatusCode != 200 {
		t.Errorf("old token after restart = %d, want 200", resp.StatusCode)
	}
	// Open again on a live conversation is a no-op.
	if ep3 := e.open(conv); ep3 != ep {
		t.Errorf("second Open = %+v", ep3)
	}
	if _, err := c.Whoami(context.Background()); err != nil {
		t.Errorf("whoami after a second Open: %v", err)
	}

	// Close ends the conversation: socket gone, directory gone.
	if err := e.b.Close("conv-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ep.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory after Close: %v, want it gone", err)
	}
	if err := e.b.Close("conv-1"); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if err := e.b.Close("../etc"); !errors.Is(err, broker.ErrInvalidID) {
		t.Errorf("Close(../etc) = %v, want ErrInvalidID", err)
	}
}

// TestRotation: after the store bumps the epoch and WriteToken rewrites
// the token, the new token works and the old one does not.
func TestRotation(t *testing.T) {
	e := newEnv(t)
	conv := broker.Conversation{ID: "conv-1", UID: os.Geteuid(), GID: os.Getegid(), Epoch: 1}
	ep := e.open(conv)
	c := e.client(ep)
	if _, err := c.Whoami(context.Background()); err != nil {
		t.Fatal(err)
	}
	conv.Epoch = 2
	e.be.SetConversation(conv)
	if _, err := c.Whoami(context.Background()); !errors.Is(err, broker.ErrUnauthenticated) {
		t.Errorf("whoami with the old token file after the epoch bump = %v, want ErrUnauthenticated", err)
	}
	if err := e.b.WriteToken("conv-1", 2, conv.UID, conv.GID); err != nil {
		t.Fatal(err)
	}
	w, err := c.Whoami(context.Background())
	if err != nil || w.Epoch != 2 {
		t.Errorf("whoami after rotation = %+v, %v", w, err)
	}
}

// TestPermissions checks modes and owners of what Open creates, for a
// conversation of another uid, and that a hostile symlink in the
// conversation's directory is replaced, not followed.
func TestPermissions(t *testing.T) {
	testenv.RequireRoot(t)
	const uid, gid = testenv.UnprivilegedUID, testenv.UnprivilegedGID
	e := newEnv(t)
	conv := broker.Conversation{ID: "conv-p", UID: uid, GID: gid, Epoch: 1}
	ep := e.open(conv)
	check := func(path string, wantType fs.FileMode, wantPerm fs.FileMode, wantUID, wantGID int) {
		t.Helper()
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Type() != wantType || fi.Mode().Perm() != wantPerm || int(st.Uid) != wantUID || int(st.Gid) != wantGID {
			t.Errorf("%s: %v %d:%d, want %v%v %d:%d", path, fi.Mode(), st.Uid, st.Gid, wantType, wantPerm, wantUID, wantGID)
		}
	}
	check(filepath.Dir(ep.Dir), fs.ModeDir, 0o711, 0, 0)
	check(ep.Dir, fs.ModeDir, 0o700, uid, gid)
	check(ep.Socket, fs.ModeSocket, 0o600, uid, gid)
	check(ep.TokenFile, 0, 0o400, uid, gid)
	entries, _ := os.ReadDir(filepath.Dir(ep.Dir))
	for _, de := range entries {
		if strings.HasPrefix(de.Name(), ".s") {
			t.Errorf("staging directory %s left behind", de.Name())
		}
	}

	// The conversation's uid reaches its socket; another uid cannot even
	// connect.
	tmp := testenv.TempDir(t)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	for p := filepath.Dir(ep.Dir); p != "/"; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	exe := copyTestBinary(t, tmp)
	run := func(asUID int) (string, error) {
		cmd := testenv.AsUser(exec.Command(exe), asUID, asUID)
		cmd.Env = []string{helperEnv + "=whoami", broker.EnvSocket + "=" + ep.Socket, broker.EnvTokenFile + "=" + ep.TokenFile}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(uid); err != nil || !strings.HasPrefix(out, "200 ") {
		t.Errorf("whoami as the conversation's uid = %q, %v; want 200", out, err)
	}
	if out, err := run(uid + 1); err == nil {
		t.Errorf("whoami as another uid = %q, want a failure to read the token or connect", out)
	}

	// A hostile conversation user replaces broker.sock and token with
	// symlinks to a root file; a restart must not chmod or chown it.
	victim := filepath.Join(tmp, "victim")
	if err := os.WriteFile(victim, []byte("root's"), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ep.Socket, ep.TokenFile} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, p); err != nil {
			t.Fatal(err)
		}
	}
	e.b = e.newBroker()
	e.open(conv)
	check(victim, 0, 0o640, 0, 0)
	check(ep.Socket, fs.ModeSocket, 0o600, uid, gid)
	check(ep.TokenFile, 0, 0o400, uid, gid)
	if b, _ := os.ReadFile(victim); string(b) != "root's" {
		t.Errorf("victim file now holds %q", b)
	}
	if _, err := net.Dial("unix", ep.Socket); err != nil {
		t.Errorf("dial after replacing the symlink: %v", err)
	}
}

func TestOpenRejects(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"", "../x", "a/b", ".hidden", "-x", strings.Repeat("a", 129), "a b"} {
		if _, err := e.b.Open(context.Background(), broker.Conversation{ID: id}); !errors.Is(err, broker.ErrInvalidID) {
			t.Errorf("Open(%q) = %v, want ErrInvalidID", id, err)
		}
	}
	if _, err := broker.New(broker.Options{RuntimeDir: "relative", Key: make([]byte, 32), Backend: e.be}); err == nil {
		t.Error("New with a relative runtime dir succeeded")
	}
	if _, err := broker.New(broker.Options{RuntimeDir: "/x", Key: make([]byte, 16), Backend: e.be}); err == nil {
		t.Error("New with a 16-byte key succeeded")
	}
}
