package hardgit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// gitSearchPath is where Look looks for git, and the PATH git's children
// get. The caller's PATH is never used: a directory an unprivileged user
// controls must not decide which program a root daemon runs.
var gitSearchPath = []string{"/usr/local/bin", "/usr/bin", "/bin"}

// noHome is HOME and XDG_CONFIG_HOME for git: a path that does not exist,
// so neither ~/.gitconfig nor ~/.config/git/{config,attributes,ignore} is
// read (and git does not warn about an unreadable one, as it would for a
// directory it may not enter).
const noHome = "/nonexistent"

// hardenedConfig is passed as "-c key=value" to every git command ohd runs.
// Each entry turns off something git would otherwise execute (or reach the
// network with) because a config file said so. The agent can write into the
// shared git directory and into its worktree, so none of those files are
// trusted. Per-driver settings (filter.<driver>.*) cannot be listed here;
// filterOverrides adds them for the drivers the repository defines.
var hardenedConfig = [][2]string{
	{"core.fsmonitor", "false"},    // fsmonitor hook program
	{"core.hooksPath", os.DevNull}, // every hook (post-checkout, reference-transaction, post-index-change, ...)
	{"core.sshCommand", ""},        // ssh program (network is off anyway, see protocol.allow)
	{"core.askPass", ""},           // askpass program
	{"core.editor", ":"},           // ":" is git's built-in "no editor"
	{"sequence.editor", ":"},       //
	{"core.pager", ""},             // empty: no pager (also --no-pager)
	{"diff.external", ""},          // external diff program (also GIT_EXTERNAL_DIFF is never set)
	{"credential.helper", ""},      // empty resets the helper list
	{"commit.gpgSign", "false"},    // commit-tree honours commit.gpgSign
	{"tag.gpgSign", "false"},       //
	{"gpg.program", ""},            // signing/verification programs
	{"gpg.ssh.program", ""},        //
	{"gpg.x509.program", ""},       //
	{"log.showSignature", "false"}, //
	{"protocol.allow", "never"},    // no transport (and GIT_ALLOW_PROTOCOL in baseEnv beats protocol.<name>.allow)
	{"submodule.recurse", "false"}, // no child git in submodules (their config is not enumerated)
	{"status.submoduleSummary", "false"},
	{"gc.auto", "0"},                 // no auto-gc (it could prune worktrees)
	{"maintenance.auto", "false"},    //
	{"core.splitIndex", "false"},     // the snapshot's temporary index must not write shared index files into the git dir
	{"core.untrackedCache", "false"}, //
	{"advice.detachedHead", "false"}, // quieter stderr
}

// filterKeys are the per-driver keys that make git run a filter program;
// filterOverrides sets each to empty (which git 2.39 treats as "no
// filter", see apply_filter in convert.c) and required=false (so the empty
// filter is not an error).
var filterKeys = [][2]string{
	{"clean", ""},
	{"smudge", ""},
	{"process", ""},
	{"required", "false"},
}

// Target says where a git command runs and as whom.
type Target struct {
	// Dir is the child's working directory.
	Dir string
	// GitDir and WorkTree are passed as --git-dir and --work-tree when set,
	// so git neither discovers the repository nor honours core.worktree.
	GitDir, WorkTree string
	// UID and GID are the repository owner; git runs with these
	// credentials when ohd is root (see Runner.sysProcAttr).
	UID, GID int
	// Discover allows repository discovery from Dir (Inspect only); it adds
	// safe.directory=* because discovery runs before the owner is known.
	Discover bool
}

// Opts are per-invocation extras.
type Opts struct {
	// Env is added to the fixed environment (e.g. GIT_INDEX_FILE).
	Env []string
	// Stdin, when set, is git's standard input (else /dev/null).
	Stdin []byte
	// In and Out, when set, stream git's standard input and output (Out
	// replaces the returned output, which is then empty).
	In  io.Reader
	Out io.Writer
	// Raw skips the filter enumeration; only for `git config` and
	// `git version`, which run no filters.
	Raw bool
	// Filters, when set, memoizes the filter enumeration for the git
	// commands of one operation at one target. Only for operations that
	// run while no agent can change the configuration (the container is
	// stopped before Snapshot and Remove).
	Filters *FilterMemo
}

// FilterMemo holds one operation's filter enumeration; its zero value is
// an empty memo.
type FilterMemo struct {
	done      bool
	overrides [][2]string
}

const (
	maxStdout = 64 << 20
	maxStderr = 64 << 10
	// maxStderrInError is how much of git's stderr an error message keeps.
	maxStderrInError = 2 << 10
)

// baseEnv is git's complete environment; nothing is inherited from ohd.
func baseEnv() []string {
	return []string{
		"PATH=" + strings.Join(gitSearchPath, ":"),
		"HOME=" + noHome,
		"XDG_CONFIG_HOME=" + noHome,
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_NO_REPLACE_OBJECTS=1", // refs/replace is agent-writable
		// No transport at all, whatever protocol.<name>.allow says: an
		// empty allow-list overrides the configuration. Without it a
		// partial clone's missing object (objects/ is agent-writable)
		// would make git lazily fetch from the promisor remote, and an
		// ext:: URL runs a command.
		"GIT_ALLOW_PROTOCOL=",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_NO_LAZY_FETCH=1", // git >= 2.44 only
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_AUTHOR_NAME=ohd",
		"GIT_AUTHOR_EMAIL=ohd@localhost",
		"GIT_COMMITTER_NAME=ohd",
		"GIT_COMMITTER_EMAIL=ohd@localhost",
	}
}

// Runner runs git hardened. Its zero value is not usable: Path and
// Timeout are required.
type Runner struct {
	// Path is the absolute path of the git binary (see Look).
	Path string
	// Timeout bounds each invocation; the process group is killed then.
	Timeout time.Duration
	// Log receives a debug record of each invocation.
	Log *slog.Logger
	// EUID is the effective uid of ohd: as root (0), git runs as the
	// target's owner; otherwise the target must belong to EUID.
	EUID int
}

// Run runs git with args at t, hardened, and returns its standard output.
// Unless o.Raw, or the command cannot run a filter (mayRunFilters), it
// first enumerates the filter drivers git sees at t and disables each one.
func (m *Runner) Run(ctx context.Context, t Target, o Opts, args ...string) (string, error) {
	env := append(baseEnv(), o.Env...)
	if !o.Raw && mayRunFilters(args) {
		var overrides [][2]string
		if o.Filters != nil && o.Filters.done {
			overrides = o.Filters.overrides
		} else {
			var err error
			if overrides, err = m.filterOverrides(ctx, t, o); err != nil {
				return "", err
			}
			if o.Filters != nil {
				o.Filters.done, o.Filters.overrides = true, overrides
			}
		}
		env = append(env, ConfigEnv(overrides)...)
	}
	return m.runIO(ctx, t, env, o, args)
}

// mayRunFilters reports whether a git command might convert between
// blobs and work tree files (and so run a filter driver). It answers false
// only for a fixed list of commands that touch refs or objects and never
// work tree content or the index; anything else, including commands added
// later, gets the filter enumeration.
func mayRunFilters(args []string) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0] {
	case "rev-parse", "update-ref", "rev-list", "commit-tree", "config", "version", "for-each-ref",
		"symbolic-ref", "pack-objects", "index-pack", "unpack-objects", "cat-file":
		return false
	// Not write-tree: writing the index re-checks racily clean entries by
	// content, through the clean filter.
	case "ls-files":
		// Listing the index (its modes, ids and paths) reads no work tree
		// file; any other option (--modified, --others, --deleted, ...)
		// looks at the work tree and gets the enumeration.
		for _, a := range args[1:] {
			if a != "--stage" && a != "-s" && a != "-z" {
				return true
			}
		}
		return false
	case "hash-object": // only from stdin, without --path
		return slices.Contains(args, "--path") || !slices.Contains(args, "--stdin")
	case "worktree":
		if len(args) < 2 {
			return true
		}
		switch args[1] {
		case "list", "lock", "unlock":
			return false
		case "add":
			return !slices.Contains(args, "--no-checkout")
		case "remove":
			// With --force git neither checks the worktree is clean nor
			// reads file content: it deletes.
			return !slices.Contains(args, "--force")
		}
	}
	return true
}

// filterOverrides lists the filter drivers defined in the configuration git
// reads at t (with the same --git-dir/--work-tree/cwd, so includeIf
// conditions, config.worktree and includes resolve exactly as for the
// command that follows) and returns settings that disable each of them.
// `git config` reads configuration and runs nothing.
func (m *Runner) filterOverrides(ctx context.Context, t Target, o Opts) ([][2]string, error) {
	env := append(baseEnv(), o.Env...)
	out, err := m.run(ctx, t, env, nil, []string{"config", "-z", "--get-regexp", `^filter\.`})
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && ge.ExitCode == 1 && ge.Stderr == "" {
			return nil, nil // no filter.* keys
		}
		return nil, fmt.Errorf("list filter drivers: %w", err)
	}
	entries, err := parseConfigList([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("list filter drivers: %w", err)
	}
	return disableFilters(filterDrivers(entries)), nil
}

// disableFilters returns the settings that turn off each driver.
func disableFilters(drivers []string) [][2]string {
	out := make([][2]string, 0, len(drivers)*len(filterKeys))
	for _, d := range drivers {
		for _, kv := range filterKeys {
			out = append(out, [2]string{"filter." + d + "." + kv[0], kv[1]})
		}
	}
	return out
}

// ConfigEnv encodes settings as GIT_CONFIG_COUNT/KEY/VALUE, which, unlike
// "-c key=value", also carries a subsection that contains "=".
func ConfigEnv(kvs [][2]string) []string {
	if len(kvs) == 0 {
		return nil
	}
	env := make([]string, 0, 1+2*len(kvs))
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(kvs)))
	for i, kv := range kvs {
		env = append(env,
			"GIT_CONFIG_KEY_"+strconv.Itoa(i)+"="+kv[0],
			"GIT_CONFIG_VALUE_"+strconv.Itoa(i)+"="+kv[1])
	}
	return env
}

// globalArgs are the options before the subcommand.
func globalArgs(t Target) []string {
	args := []string{"--no-pager"}
	for _, kv := range hardenedConfig {
		args = append(args, "-c", kv[0]+"="+kv[1])
	}
	if t.Discover {
		args = append(args, "-c", "safe.directory=*")
	}
	if t.GitDir != "" {
		args = append(args, "--git-dir="+t.GitDir)
	}
	if t.WorkTree != "" {
		args = append(args, "--work-tree="+t.WorkTree)
	}
	return args
}

// run executes git directly (no shell) with env as its whole environment,
// in its own process group, as the target's owner, under m.Timeout.
func (m *Runner) run(ctx context.Context, t Target, env []string, stdin []byte, args []string) (string, error) {
	return m.runIO(ctx, t, env, Opts{Stdin: stdin}, args)
}

// runIO is run with o's stdin and streams.
func (m *Runner) runIO(ctx context.Context, t Target, env []string, o Opts, args []string) (string, error) {
	attr, err := m.sysProcAttr(t.UID, t.GID)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, m.Timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, m.Path, append(globalArgs(t), args...)...)
	cmd.Dir = t.Dir
	cmd.Env = env
	cmd.SysProcAttr = attr
	// Kill the whole group: git may have started children of its own.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	switch {
	case o.In != nil:
		cmd.Stdin = o.In
	case o.Stdin != nil:
		cmd.Stdin = bytes.NewReader(o.Stdin)
	}
	stdout := &cappedBuffer{max: maxStdout}
	stderr := &cappedBuffer{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if o.Out != nil {
		cmd.Stdout = o.Out
	}

	start := time.Now()
	err = cmd.Run()
	m.log().Debug("git", "args", args, "dir", t.Dir, "uid", t.UID, "duration", time.Since(start), "err", err)
	if err == nil && stdout.truncated {
		err = fmt.Errorf("output larger than %d bytes", maxStdout)
	}
	if err != nil {
		ge := &GitError{Args: args, Dir: t.Dir, ExitCode: -1, Stderr: trimStderr(stderr.String()), Err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() {
			ge.ExitCode = ee.ExitCode()
		}
		if ctx.Err() != nil {
			ge.Err = fmt.Errorf("%w (timeout %s)", ctx.Err(), m.Timeout)
		}
		return stdout.String(), ge
	}
	return stdout.String(), nil
}

// trimStderr keeps an error message short and on one line.
func trimStderr(s string) string {
	s = strings.TrimSpace(s)
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
	if len(s) > maxStderrInError {
		s = s[:maxStderrInError] + "..."
	}
	return s
}

// cappedBuffer keeps the first max bytes written and notes the rest.
type cappedBuffer struct {
	bytes.Buffer
	max       int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// sysProcAttr returns the process attributes for running git as uid:gid.
// As root, git runs with the owner's credentials and no supplementary
// groups; otherwise ohd must be the owner.
func (m *Runner) sysProcAttr(uid, gid int) (*syscall.SysProcAttr, error) {
	attr := newSysProcAttr()
	if m.EUID == 0 {
		if uid != 0 || gid != 0 {
			attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		}
		return attr, nil
	}
	if uid != m.EUID {
		return nil, OwnerError(uid, m.EUID)
	}
	return attr, nil
}

// OwnerError is the error for git that cannot run as a repository's owner
// (uid owner) because ohd runs as uid self and is not root. It wraps
// ErrOwner.
func OwnerError(owner, self int) error {
	return fmt.Errorf("%w: the repository belongs to uid %d but ohd runs as uid %d: run ohd as root or as the repository's owner", ErrOwner, owner, self)
}

// Look finds git in the fixed search path.
func Look() (string, error) {
	for _, d := range gitSearchPath {
		p := filepath.Join(d, "git")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("git not found in %s: install git or set the git binary explicitly", strings.Join(gitSearchPath, ":"))
}

// MinVersion is the oldest git ohd supports: `worktree list -z`
// appeared in 2.36.
var MinVersion = [3]int{2, 36, 0}

// ParseVersion parses the output of `git version`, e.g.
// "git version 2.39.5" or "git version 2.39.3 (Apple Git-146)".
func ParseVersion(s string) ([3]int, error) {
	var v [3]int
	f := strings.Fields(s)
	if len(f) < 3 || f[0] != "git" || f[1] != "version" {
		return v, fmt.Errorf("unexpected `git version` output %q", s)
	}
	parts := strings.Split(f[2], ".")
	if len(parts) < 2 {
		return v, fmt.Errorf("unexpected git version %q", f[2])
	}
	for i := 0; i < 3 && i < len(parts); i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			if i == 2 { // e.g. "2.40.rc0"
				break
			}
			return v, fmt.Errorf("unexpected git version %q", f[2])
		}
		v[i] = n
	}
	return v, nil
}

// VersionLess reports whether version a is older than b.
func VersionLess(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// log returns m.Log, or a logger that discards.
func (m *Runner) log() *slog.Logger {
	if m.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Log
}
