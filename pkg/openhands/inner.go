package openhands

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultImage is the agent server image ohd runs when none is configured:
// the release Agent Canvas v1.27.1 pins (issue 12's release note).
const DefaultImage = "ghcr.io/openhands/agent-server:1.54.0-python"

// ImageDockerfile is the agent server image's Dockerfile in a checkout of
// OpenHands/software-agent-sdk (ref §6 "Image": docker/Dockerfile,
// targets binary and source, build context the repository's root).
const ImageDockerfile = "openhands-agent-server/openhands/agent_server/docker/Dockerfile"

// BuildCommand is how to build the agent server image as ref from a
// checkout of OpenHands/software-agent-sdk (at the release's tag), run
// at the checkout's root: the command a missing image's error advises.
func BuildCommand(ref string) string {
	return "docker build -f " + ImageDockerfile + " --target binary -t " + ref + " ."
}

// Environment variables the agent server reads (ref §1, §5, §6).
const (
	// SessionKeyEnv holds the inner session key (OH_SESSION_API_KEYS_0;
	// config.py's session_api_keys, ref §5 environment table).
	SessionKeyEnv = "OH_SESSION_API_KEYS_0"
	// SecretKeyEnv keys the server's cipher for persisted secrets (ref §1:
	// config field secret_key, env OH_SECRET_KEY). Without it the server
	// falls back to its session key, which ohd changes per start.
	SecretKeyEnv = "OH_SECRET_KEY"
)

// InnerDirs are the host directories of one conversation's inner server.
// Each is mounted into the container at its own absolute path, so the
// paths the server writes into its files mean the same on both sides.
type InnerDirs struct {
	// ID is the conversation's id.
	ID string
	// Root is <root>/<id>: owned by the conversation's uid, 0700.
	Root string
	// Home is HOME (the directory <root>/<id>/persistence: its name is
	// the one earlier releases gave HOME).
	Home string
	// Persistence is OH_PERSISTENCE_DIR, $HOME/.openhands (settings,
	// secrets, LLM and agent profiles: ref §6 "Default paths"): the real
	// server's profile router writes OH_PERSISTENCE_DIR/profiles but a
	// conversation's switch_profile reads ~/.openhands/profiles, so the two
	// must be one directory (ref §10; issue 28).
	Persistence string
	// Conversations is OH_CONVERSATIONS_PATH: one <id.hex>/ per
	// conversation with meta.json, base_state.json and events/ (ref §5
	// "Metadata reads").
	Conversations string
	// BashEvents is OH_BASH_EVENTS_DIR: one file per event of the
	// terminal routes (/api/bash, /sockets/bash-events; paths.go).
	BashEvents string
}

// DirsOf returns the layout of conversation id under root (ohd uses
// <state-dir>/inner):
//
//	<root>/<id>/persistence              HOME
//	<root>/<id>/persistence/.openhands   OH_PERSISTENCE_DIR
//	<root>/<id>/conversations            OH_CONVERSATIONS_PATH
//	<root>/<id>/bash_events              OH_BASH_EVENTS_DIR
func DirsOf(root, id string) InnerDirs {
	r := filepath.Join(root, id)
	home := filepath.Join(r, "persistence")
	return InnerDirs{
		ID: id, Root: r, Home: home, Persistence: filepath.Join(home, ".openhands"),
		Conversations: filepath.Join(r, "conversations"), BashEvents: filepath.Join(r, "bash_events"),
	}
}

// Mounted are the directories under Root that the container gets, each
// bind-mounted read-write at its own path, owned by the conversation's
// uid: every writable default path of the server that ohd moves to the
// host (paths.go). Persistence is inside Home.
func (d InnerDirs) Mounted() []string {
	return []string{d.Home, d.Conversations, d.BashEvents}
}

// StateDir is where the agent server keeps conversation id's files under
// its conversations path: the id's 32 hex digits without dashes (ref §5:
// "<conversations_path>/<id.hex>/").
func (d InnerDirs) StateDir(id string) string {
	return filepath.Join(d.Conversations, strings.ReplaceAll(id, "-", ""))
}

// Args are the arguments ohd gives the image after its entrypoint, as the
// agent server's own docker runtime does (ref §5 "docker run flags": the
// image, then --host 0.0.0.0 --port 8000). The host is explicit because
// __main__.py binds 127.0.0.1 unless a session key is configured (ref §6
// "Arguments"), and the container's port is reached from outside it.
func Args(port int) []string {
	return []string{"--host", "0.0.0.0", "--port", strconv.Itoa(port)}
}

// Env is the environment the agent server needs to run as a uid that is
// not the image's own (ref §5 environment table, §6, §9): its home, its
// persistence, conversations and bash events directories on the host
// (every relative default path it writes: paths.go), the local
// conversation runtime (the container is the sandbox), no conversation
// lease (LeaseTTLEnv), VS Code under the conversation's path on ohd
// (VSCodeBasePathEnv, ports.go), and git never prompting (there is no terminal). It
// holds paths only; the two keys
// (SessionKeyEnv, SecretKeyEnv) reach the server's process through files,
// never through the container's configuration.
func Env(d InnerDirs) []string {
	return []string{
		"HOME=" + d.Home,
		"OH_PERSISTENCE_DIR=" + d.Persistence,
		"OH_CONVERSATIONS_PATH=" + d.Conversations,
		BashEventsDirEnv + "=" + d.BashEvents,
		LeaseTTLEnv + "=0",
		VSCodeBasePathEnv + "=" + PortPath(d.ID, "vscode"),
		"OH_CONVERSATION_RUNTIME=local",
		"GIT_TERMINAL_PROMPT=0",
	}
}

// owned are the variables Env and ohd set; an operator's extra variable
// may not replace them.
var owned = map[string]bool{
	"HOME": true, "OH_PERSISTENCE_DIR": true, "OH_CONVERSATIONS_PATH": true, BashEventsDirEnv: true, LeaseTTLEnv: true, VSCodeBasePathEnv: true,
	"OH_CONVERSATION_RUNTIME": true, "GIT_TERMINAL_PROMPT": true,
	SessionKeyEnv: true, SecretKeyEnv: true, "SESSION_API_KEY": true,
	"OH_INTERNAL_SERVER_URL": true, "PATH": true,
}

// ownedPrefixes are families of variables ohd sets or the server reads as
// keys.
var ownedPrefixes = []string{"OH_SESSION_API_KEYS_", "OHD_", "GIT_CONFIG_"}

// CheckExtraEnv checks an operator's extra variable NAME=VALUE for the
// inner server (ohd serve --inner-env). It refuses a malformed name, a
// name that looks like a secret (IsSecretKey: the value would be visible
// in docker inspect; hand secrets to the broker instead), and a name ohd
// sets itself.
func CheckExtraEnv(kv string) error {
	name, _, ok := strings.Cut(kv, "=")
	if !ok || name == "" {
		return fmt.Errorf("inner environment %q: want NAME=VALUE", kv)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return fmt.Errorf("inner environment %q: the name may hold only letters, digits and _ (not starting with a digit)", name)
		}
	}
	if IsSecretKey(name) {
		return fmt.Errorf("inner environment %s: the name looks like a secret, and a container's environment is visible to docker inspect and to the agent: store it with ohctl secret set and grant it to the conversation", name)
	}
	if owned[name] {
		return fmt.Errorf("inner environment %s: ohd sets this variable itself", name)
	}
	for _, p := range ownedPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("inner environment %s: ohd sets the %s* variables itself", name, p)
		}
	}
	return nil
}
