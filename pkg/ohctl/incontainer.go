package ohctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/freeze"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
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
			return broker.GitCredentialHelper(ctx, a[0], s.env.Stdin, s.env.Stdout, s.env.Stderr, s.env.Getenv)
		},
	}
}

// innerExecCmd is the entrypoint wrapper of conversation containers: it
// reads each --env-file NAME=FILE (files in the read-only broker
// directory, 0400: the inner session key, the inner server's cipher key)
// and runs the image's own entrypoint with NAME set to the file's content,
// limited first (gitboundary.LimitAgent: no attribute, so no ACL, is the
// agent's to set).
// The values thus never appear in the container's configuration (docker
// inspect), only in the agent server's own process. It stays the inner
// server's parent and serves the broker relay beside it (superviseInner).
func (s *state) innerExecCmd() *cli.Command {
	return &cli.Command{
		Name:            "inner-exec",
		Hidden:          true,
		Usage:           "run the inner agent server with its keys (container entrypoint)",
		ArgsUsage:       "--env-file NAME=FILE... -- CMD...",
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			files, argv, err := parseInnerExec(cmd.Args().Slice())
			if err != nil {
				return err
			}
			set := map[string]string{}
			for name, file := range files {
				v, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("inner-exec: read %s for %s: %w", file, name, err)
				}
				set[name] = strings.TrimSpace(string(v))
			}
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return fmt.Errorf("inner-exec: %w", err)
			}
			// Before anything of the agent's runs: it may not set
			// attributes, so not give itself a default ACL entry on a
			// directory it owns (gitboundary.LimitAgent). The relay in
			// this process needs none either.
			if err := gitboundary.LimitAgent(); err != nil {
				return fmt.Errorf("inner-exec: %w", err)
			}
			env := []string{}
			for _, kv := range os.Environ() {
				if name, _, _ := strings.Cut(kv, "="); !hasKey(set, name) {
					env = append(env, kv)
				}
			}
			for name, v := range set {
				env = append(env, name+"="+v)
			}
			return superviseInner(ctx, path, argv, env, s.env.Getenv, s.env.Stderr)
		},
	}
}

// limitCmd runs a command in a conversation's container under the same
// seccomp filter as the agent server (gitboundary.LimitAgent): ohd wraps
// every command it execs there with it (ohctl exec's, its own git
// status), so no process of the agent's uid in the container can set an
// attribute, nor be made to by an agent that attaches to it.
func (s *state) limitCmd() *cli.Command {
	return &cli.Command{
		Name:            "limit",
		Hidden:          true,
		Usage:           "run a command under the agent's seccomp filter (inside a container)",
		ArgsUsage:       "-- CMD...",
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			argv := cmd.Args().Slice()
			if len(argv) > 0 && argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usagef("limit: usage: ohctl limit -- CMD...")
			}
			path, err := exec.LookPath(argv[0])
			if err != nil {
				fmt.Fprintf(s.env.Stderr, "%v\n", err)
				return exitError{code: 127}
			}
			if err := gitboundary.LimitAgent(); err != nil {
				return fmt.Errorf("limit: %w", err)
			}
			return fmt.Errorf("limit: %w", syscall.Exec(path, argv, os.Environ()))
		},
	}
}

// parseInnerExec splits inner-exec's arguments into the --env-file
// variables (name to file) and the command after "--".
func parseInnerExec(a []string) (map[string]string, []string, error) {
	const usage = "inner-exec: usage: ohctl inner-exec --env-file NAME=FILE... -- CMD..."
	files := map[string]string{}
	for len(a) > 0 && a[0] != "--" {
		if a[0] != "--env-file" || len(a) < 2 {
			return nil, nil, usagef("%s", usage)
		}
		name, file, ok := strings.Cut(a[1], "=")
		if !ok || !envName(name) || file == "" {
			return nil, nil, usagef("inner-exec: --env-file %q: want NAME=FILE", a[1])
		}
		files[name] = file
		a = a[2:]
	}
	if len(a) < 2 || len(files) == 0 {
		return nil, nil, usagef("%s", usage)
	}
	return files, a[1:], nil
}

func envName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

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
			if i := slices.Index(a, freeze.HeldFlag); i >= 0 {
				return runViewHeld(ctx, slices.Delete(a, i, i+1), s.env.Stdin, s.env.Stdout)
			}
			return worktree.RunView(ctx, a, s.env.Stdin, s.env.Stdout)
		},
	}
}

// runViewHeld runs `ohctl view` args while ohd holds its standard input
// open (freeze.HeldFlag): if ohd goes away before the command is done,
// the command is called off and every process of the container resumed
// (freeze.Held).
func runViewHeld(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	err := freeze.Held(ctx, stdin, func(ctx context.Context) error {
		return worktree.RunView(ctx, args, nil, stdout)
	})
	if errors.Is(err, freeze.ErrHolderGone) {
		return fmt.Errorf("ohctl view %s: %w", args[0], err)
	}
	return err
}
