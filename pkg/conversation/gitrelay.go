package conversation

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/store"
)

// brokerGitOptions converts the store's git grant options for the broker.
func brokerGitOptions(m map[string]store.GitGrantOptions) map[string]broker.GitOptions {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]broker.GitOptions, len(m))
	for k, v := range m {
		out[k] = broker.GitOptions{Push: v.Push, Helper: v.Helper}
	}
	return out
}

// gitRelayConfig is the git configuration that sends the conversation's
// relayed git hosts through the broker relay inside the container
// (url.<relay>/git/HOST/.insteadOf), one entry per host, from the grants
// the conversation has now. A host whose every grant is served through
// the credential helper (--git-relay=false), and a host with no git-host
// configuration, get none. It reaches git as a file (GitRelayConfigFile,
// in the broker directory) that git includes through the container's
// GIT_CONFIG_*, so a grant or git host changed while the conversation
// runs applies to git's next command.
func (m *Manager) gitRelayConfig(g store.Grants) [][2]string {
	var out [][2]string
	seen := map[string]bool{}
	helperOnly := map[string]bool{}
	for _, name := range g.Git {
		host, _, _ := strings.Cut(name, "/")
		host = strings.ToLower(host)
		if h, ok := helperOnly[host]; !ok || h {
			helperOnly[host] = g.GitOptions[name].Helper
		}
	}
	for _, name := range g.Git {
		host, _, _ := strings.Cut(name, "/")
		host = strings.ToLower(host)
		if seen[host] || helperOnly[host] {
			continue
		}
		seen[host] = true
		cred, err := m.st.GitCredential(host)
		if err != nil {
			continue
		}
		out = append(out, broker.GitRelayConfig(cred.Scheme, host))
	}
	return out
}

// validateGitOptions checks that git options name git grants of g and
// hold valid push patterns.
func validateGitOptions(g store.Grants) error {
	for name, opt := range g.GitOptions {
		if !containsString(g.Git, name) {
			return fmt.Errorf("%w: git_options names %q, which is not a git grant", ErrInvalid, name)
		}
		if err := validatePushPatterns(opt.Push); err != nil {
			return err
		}
	}
	return nil
}

func validatePushPatterns(l []string) error {
	for _, p := range l {
		if !broker.ValidPushPattern(p) {
			return fmt.Errorf("%w: push pattern %q: use a ref name under refs/, where * stands for any characters, e.g. 'refs/heads/feature/*'", ErrInvalid, p)
		}
	}
	return nil
}

// GrantGit adds (or keeps) the git grant name of a live conversation and
// sets its options: its push patterns, and whether it is served through
// the credential helper instead of the relay.
func (m *Manager) GrantGit(id, name string, opt store.GitGrantOptions) (store.Conversation, error) {
	if err := ValidateGrant(store.KindGit, name); err != nil {
		return store.Conversation{}, err
	}
	if err := validatePushPatterns(opt.Push); err != nil {
		return store.Conversation{}, err
	}
	if _, err := m.liveConversation(id); err != nil {
		return store.Conversation{}, err
	}
	c, err := m.st.UpdateConversation(id, func(c *store.Conversation) error {
		c.Grants.Add(store.KindGit, name)
		c.Grants.SetGitOptions(name, opt)
		return nil
	})
	if err != nil {
		return c, err
	}
	return c, m.writeGitRelayConfig(c)
}

func containsString(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// ValidateGitHost checks and normalizes a git host's configuration
// (`ohctl git-host set [SCHEME://]HOST[:PORT]`): the host lower-cased,
// with an optional port; the scheme https (stored as "") or http, which
// only a loopback host may use (a test server: the credential would cross
// the network in the clear); auth basic (stored as "") or bearer.
func ValidateGitHost(c *store.GitCredential) error {
	c.Host = strings.ToLower(c.Host)
	if err := ValidateGrant(store.KindGit, c.Host); err != nil || strings.Contains(c.Host, "/") {
		return fmt.Errorf("%w: git host %q: use [https://]HOST[:PORT], e.g. github.com", ErrInvalid, c.Host)
	}
	switch strings.ToLower(c.Scheme) {
	case "", "https":
		c.Scheme = ""
	case "http":
		if !loopbackHost(c.Host) {
			return fmt.Errorf("%w: git host http://%s: http is allowed for a loopback host only (the credential would cross the network in the clear); use https://", ErrInvalid, c.Host)
		}
		c.Scheme = "http"
	default:
		return fmt.Errorf("%w: git host %s: the scheme must be https or http", ErrInvalid, c.Host)
	}
	switch strings.ToLower(c.Auth) {
	case "", "basic":
		c.Auth = ""
	case "bearer":
		c.Auth = "bearer"
	default:
		return fmt.Errorf("%w: git host %s: --auth must be basic or bearer", ErrInvalid, c.Host)
	}
	return nil
}

func loopbackHost(hostport string) bool {
	h := hostport
	if sh, _, err := net.SplitHostPort(hostport); err == nil {
		h = sh
	}
	h = strings.Trim(h, "[]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// GitRelayConfigFile is the file of the conversation's broker directory
// that holds gitRelayConfig, and ContainerGitRelayConfig where the
// container sees it (include.path of its git configuration).
const (
	GitRelayConfigFile      = "gitconfig"
	ContainerGitRelayConfig = broker.ContainerDir + "/" + GitRelayConfigFile
)

// gitConfigText renders key/value settings ("section.sub.name" or
// "section.name") in git's configuration file format.
func gitConfigText(settings [][2]string) []byte {
	var b strings.Builder
	b.WriteString("# Written by ohd: the git hosts this conversation reaches through the broker relay. Rewritten when its grants change.\n")
	for _, kv := range settings {
		key := kv[0]
		first, last := strings.IndexByte(key, '.'), strings.LastIndexByte(key, '.')
		if first < 0 {
			continue
		}
		section, name := key[:first], key[last+1:]
		if first == last {
			fmt.Fprintf(&b, "[%s]\n", section)
		} else {
			sub := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key[first+1 : last])
			fmt.Fprintf(&b, "[%s \"%s\"]\n", section, sub)
		}
		fmt.Fprintf(&b, "\t%s = %s\n", name, strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(kv[1]))
	}
	return []byte(b.String())
}

// writeGitRelayConfig writes the conversation's git relay configuration
// into its broker directory (a container runtime's only: the local one
// has no relay).
func (m *Manager) writeGitRelayConfig(conv store.Conversation) error {
	dir := m.brokerDir(conv.ID)
	if m.rt.Kind() == "local" {
		return nil
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // written when the broker opens
	}
	uid, gid := agentOf(conv)
	return writeOwnedFile(filepath.Join(dir, GitRelayConfigFile), gitConfigText(m.gitRelayConfig(conv.Grants)), 0o444, uid, gid)
}

// RefreshGitRelayConfigs rewrites the git relay configuration of every
// live conversation, after a git host was set or removed. A failure is
// logged: the conversation keeps its previous configuration.
func (m *Manager) RefreshGitRelayConfigs() {
	for _, c := range m.st.Conversations() {
		if !c.State.Live() {
			continue
		}
		if err := m.writeGitRelayConfig(c); err != nil {
			m.log.Error("git relay configuration", "conversation", c.ID, "err", err)
		}
	}
}
