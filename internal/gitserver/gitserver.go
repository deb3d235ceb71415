package gitserver

import (
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Options configure a Server.
type Options struct {
	// Username and Token are the credential the server demands: Basic
	// with both, or, with Bearer, "Authorization: Bearer <Token>".
	Username, Token string
	Bearer          bool
	// RedirectTo, if set, answers every request with a 302 to this URL
	// (plus the request's path): a host sending git elsewhere.
	RedirectTo string
}

// Server is a git smart-HTTP host on loopback.
type Server struct {
	*httptest.Server
	// Host is "127.0.0.1:port".
	Host string
	// Root holds the bare repositories.
	Root string
	opts Options

	mu   sync.Mutex
	auth []string // every Authorization header received, in order
}

// Start starts a server with repositories under a temporary directory;
// the test's cleanup stops it.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server with repositories under root; Close stops it.
func New(root string, opts Options) (*Server, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("gitserver: git not found: %w", err)
	}
	s := &Server{Root: root, opts: opts}
	backend := &cgi.Handler{
		Path: git,
		Args: []string{"http-backend"},
		Dir:  s.Root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + s.Root,
			"REMOTE_USER=ohd-test",
		},
		InheritEnv: []string{"PATH"},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		s.mu.Lock()
		s.auth = append(s.auth, got)
		s.mu.Unlock()
		if opts.RedirectTo != "" {
			http.Redirect(w, r, opts.RedirectTo+r.URL.RequestURI(), http.StatusFound)
			return
		}
		if !s.authorized(got) {
			if opts.Bearer {
				w.Header().Set("WWW-Authenticate", `Bearer realm="git"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			}
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.ContentLength < 0 {
			// Go's CGI handler refuses chunked bodies, which git sends
			// for large pushes: spool the body so it has a length.
			f, err := spool(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer os.Remove(f.Name())
			defer f.Close()
			st, _ := f.Stat()
			r.Body, r.ContentLength, r.TransferEncoding = f, st.Size(), nil
			r.Header.Set("Content-Length", fmt.Sprint(st.Size()))
		}
		backend.ServeHTTP(w, r)
	}))
	s.Host = strings.TrimPrefix(s.URL, "http://")
	return s, nil
}

func (s *Server) authorized(h string) bool {
	var want string
	if s.opts.Bearer {
		want = "Bearer " + s.opts.Token
	} else {
		want = "Basic " + base64.StdEncoding.EncodeToString([]byte(s.opts.Username+":"+s.opts.Token))
	}
	return subtle.ConstantTimeCompare([]byte(h), []byte(want)) == 1
}

// Authorizations returns every Authorization header the server received
// ("" for none), in order.
func (s *Server) Authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// Repo creates the bare repository name (e.g. "acme/widgets.git") that
// accepts pushes and partial clones (uploadpack.allowFilter), and returns
// its directory.
func (s *Server) Repo(t testing.TB, name string) string {
	t.Helper()
	dir, err := s.NewRepo(name)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// NewRepo is Repo returning its error.
func (s *Server) NewRepo(name string) (string, error) {
	dir := filepath.Join(s.Root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	if _, err := Run("", "init", "-q", "--bare", "-b", "main", dir); err != nil {
		return "", err
	}
	for _, kv := range [][2]string{{"http.receivepack", "true"}, {"uploadpack.allowFilter", "true"}, {"uploadpack.allowAnySHA1InWant", "true"}} {
		if _, err := Run(dir, "config", kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Git runs git in dir with no system or global configuration and fails
// the test on error; it returns the output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := Run(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Run runs git as Git does and returns its output, or an error holding
// it.
func Run(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func spool(r io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "gitserver-body")
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}
