package ohctl

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// gitCredentialCmd is git's credential helper inside a container:
// credential.helper = "/run/ohd/bin/ohctl git-credential".
func (s *state) gitCredentialCmd() *cli.Command {
	return &cli.Command{
		Name:      "git-credential",
		Usage:     "git credential helper that asks the conversation's broker (inside a container)",
		ArgsUsage: "get|store|erase",
		Description: "Reads git's credential request on standard input and answers from the broker at\n" +
			"$OHD_BROKER_SOCKET (default /run/ohd/broker.sock) with the token in $OHD_BROKER_TOKEN_FILE\n" +
			"(default /run/ohd/token).",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ACTION")
			if err != nil {
				return err
			}
			switch a[0] {
			case "get", "store", "erase":
			default:
				return usagef("git-credential %q: the action is get, store or erase", a[0])
			}
			return broker.GitCredentialHelper(ctx, a[0], s.env.Stdin, s.env.Stdout, s.env.Getenv)
		},
	}
}

// innerExecCmd is the entrypoint wrapper of conversation containers: it
// reads the inner session key from a file in the read-only broker
// directory and runs the image's own entrypoint with the key in
// OH_SESSION_API_KEYS_0. The key thus never appears in the container's
// configuration (docker inspect), only in the agent server's own process.
// It stays the inner server's parent and serves the broker relay beside
// it (superviseInner).
func (s *state) innerExecCmd() *cli.Command {
	return &cli.Command{
		Name:            "inner-exec",
		Hidden:          true,
		Usage:           "run the inner agent server with its session key (container entrypoint)",
		ArgsUsage:       "--key-file FILE -- CMD...",
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a := cmd.Args().Slice()
			if len(a) < 4 || a[0] != "--key-file" || a[2] != "--" {
				return usagef("inner-exec: usage: ohctl inner-exec --key-file FILE -- CMD...")
			}
			key, err := os.ReadFile(a[1])
			if err != nil {
				return fmt.Errorf("inner-exec: read session key: %w", err)
			}
			argv := a[3:]
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return fmt.Errorf("inner-exec: %w", err)
			}
			env := []string{}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "OH_SESSION_API_KEYS_0=") {
					env = append(env, kv)
				}
			}
			env = append(env, "OH_SESSION_API_KEYS_0="+strings.TrimSpace(string(key)))
			return superviseInner(ctx, path, argv, env, s.env.Getenv, s.env.Stderr)
		},
	}
}

// viewCmd runs the sandbox side of ohd's git view (pkg/worktree.RunView)
// inside a conversation's container: ohd calls it there to read what the
// agent wrote, so that no host process does.
func (s *state) viewCmd() *cli.Command {
	return &cli.Command{
		Name:            "view",
		Hidden:          true,
		Usage:           "the sandbox side of the conversation's git view (run by ohd inside the container)",
		ArgsUsage:       "collect|pack|idle [FLAGS]",
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a := cmd.Args().Slice()
			if len(a) > 0 && a[0] == "idle" {
				// A sandbox container's command: wait for the stop signal.
				sig := make(chan os.Signal, 1)
				signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
				select {
				case <-sig:
				case <-ctx.Done():
				}
				return nil
			}
			return worktree.RunView(ctx, a, s.env.Stdin, s.env.Stdout)
		},
	}
}
