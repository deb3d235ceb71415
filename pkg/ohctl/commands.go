package ohctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/version"
)

func (s *state) lsCmd() *cli.Command {
	return &cli.Command{
		Name:  "ls",
		Usage: "list conversations",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "include deleted and failed conversations"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := args(cmd); err != nil {
				return err
			}
			convs, err := s.client().List(ctx)
			if err != nil {
				return err
			}
			if !cmd.Bool("all") {
				kept := convs[:0]
				for _, c := range convs {
					if c.State.Live() {
						kept = append(kept, c)
					}
				}
				convs = kept
			}
			if s.json {
				return printJSON(s.env.Stdout, nonNil(convs))
			}
			printConversations(s.env.Stdout, convs, s.env.Now())
			return nil
		},
	}
}

func (s *state) showCmd() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show one conversation",
		ArgsUsage: "ID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ID")
			if err != nil {
				return err
			}
			c, err := s.client().Get(ctx, a[0])
			if err != nil {
				return err
			}
			if s.json {
				return printJSON(s.env.Stdout, c)
			}
			printConversation(s.env.Stdout, c, s.env.Now())
			return nil
		},
	}
}

func (s *state) createCmd() *cli.Command {
	return &cli.Command{
		Name:  "create",
		Usage: "create a conversation for a workspace",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "repo", Usage: "absolute path of the workspace (a git repository for --worktree)", Required: true},
			&cli.BoolFlag{Name: "worktree", Usage: "give the conversation its own git worktree on branch openhands/<id> (without it, the agent works in the folder itself, its git dir a view whose commits go to openhands/<id>)"},
			&cli.StringFlag{Name: "start-point", Usage: "branch, tag or commit the worktree starts from (default: origin/HEAD, main, master, HEAD)"},
			&cli.StringFlag{Name: "id", Usage: "conversation id (a UUID); default: a new one"},
			&cli.StringSliceFlag{Name: "grant-secret", Usage: "grant a secret (repeatable)"},
			&cli.StringSliceFlag{Name: "grant-git", Usage: "grant git credentials for host[/path-prefix] (repeatable)"},
			&cli.StringSliceFlag{Name: "grant-llm", Usage: "grant an LLM profile (repeatable)"},
			&cli.StringSliceFlag{Name: "grant-oauth", Usage: "grant an OAuth server's access token (repeatable)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := args(cmd); err != nil {
				return err
			}
			req := control.CreateRequest{
				ID: cmd.String("id"), Repo: cmd.String("repo"), Worktree: cmd.Bool("worktree"), StartPoint: cmd.String("start-point"),
				Grants: store.Grants{
					Secrets: cmd.StringSlice("grant-secret"), Git: cmd.StringSlice("grant-git"),
					LLM: cmd.StringSlice("grant-llm"), OAuth: cmd.StringSlice("grant-oauth"),
				},
			}
			// A create whose image the engine lacks waits for its pull:
			// show how far it is.
			var c store.Conversation
			err := s.whilePulling(ctx, func(ctx context.Context) (err error) {
				c, err = s.client().Create(ctx, req)
				return err
			})
			if err != nil {
				var ce *control.Error
				if errors.As(err, &ce) && ce.Step != "" && ce.Step != "image" {
					return fmt.Errorf("%s\nhint: `ohctl ls --all` shows the failed record; `ohctl doctor` checks the setup", ce.Message)
				}
				return err
			}
			if s.json {
				return printJSON(s.env.Stdout, c)
			}
			printConversation(s.env.Stdout, c, s.env.Now())
			return nil
		},
	}
}

func (s *state) rmCmd() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "end a conversation: stop its container, snapshot uncommitted work, remove its worktree",
		ArgsUsage: "ID",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "discard", Usage: "also delete the branch and any snapshot: the work is lost"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ID")
			if err != nil {
				return err
			}
			c, err := s.client().Remove(ctx, a[0], cmd.Bool("discard"))
			if err != nil {
				return err
			}
			if s.json {
				return printJSON(s.env.Stdout, c)
			}
			printRemoval(s.env.Stdout, c)
			return nil
		},
	}
}

func (s *state) restoreCmd() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "recreate an ended conversation's work in a new worktree: its branch checked out, its uncommitted work applied",
		ArgsUsage: "ID",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "into", Usage: "the new worktree's absolute path (default: <repository>.restore-<first 8 characters of ID>)"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ID")
			if err != nil {
				return err
			}
			into := cmd.String("into")
			if into != "" && !filepath.IsAbs(into) {
				abs, err := filepath.Abs(into)
				if err != nil {
					return usagef("--into %q: %v", into, err)
				}
				into = abs
			}
			res, err := s.client().Restore(ctx, a[0], control.RestoreRequest{Into: into})
			if err != nil {
				return err
			}
			if s.json {
				return printJSON(s.env.Stdout, res)
			}
			if res.Already {
				fmt.Fprintf(s.env.Stdout, "conversation %s was already restored in %s on branch %s\n", res.ID, res.Path, res.Branch)
				return nil
			}
			fmt.Fprintf(s.env.Stdout, "restored conversation %s in %s on branch %s\n", res.ID, res.Path, res.Branch)
			if res.Snapshot != "" {
				fmt.Fprintf(s.env.Stdout, "its uncommitted work (snapshot %s) is applied as uncommitted changes: see git -C %s status\n", short(res.Snapshot), res.Path)
			}
			if res.Staged {
				fmt.Fprintln(s.env.Stdout, "what was staged is staged again")
			}
			for _, b := range res.Branches {
				fmt.Fprintf(s.env.Stdout, "side branch of its git view restored as local branch %s\n", b)
			}
			for _, tag := range res.Tags {
				fmt.Fprintf(s.env.Stdout, "tag of its git view restored as tag %s\n", tag)
			}
			if res.Stash != "" {
				fmt.Fprintf(s.env.Stdout, "its stash (%d entries, newest %s) is on the repository's stash, below your own entries: git -C %s stash list\n", res.StashEntries, short(res.Stash), res.Path)
			}
			for _, k := range res.Kept {
				fmt.Fprintf(s.env.Stdout, "also kept from its git view: %s (git log %s)\n", k, k)
			}
			if res.Note != "" {
				fmt.Fprintln(s.env.Stdout, res.Note)
			}
			if res.GitDirsArchive != "" {
				fmt.Fprintf(s.env.Stdout, "the git directories the agent made (%s), moved out of your tree at the removal, are in %s as files (tar -tvf it; extract it only where your git never runs)\n", strings.Join(res.GitDirs, ", "), res.GitDirsArchive)
			}
			if res.GitDirsNote != "" {
				fmt.Fprintln(s.env.Stdout, res.GitDirsNote)
			}
			return nil
		},
	}
}

func (s *state) pruneCmd() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "remove stopped conversations, old records and orphaned containers and sockets (never deletes work)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "say what would be done, do nothing"},
			&cli.StringFlag{Name: "older-than", Usage: "only conversations inactive at least this long (e.g. 72h)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := args(cmd); err != nil {
				return err
			}
			rep, err := s.client().Prune(ctx, control.PruneRequest{DryRun: cmd.Bool("dry-run"), OlderThan: cmd.String("older-than")})
			if err != nil {
				return err
			}
			if s.json {
				return printJSON(s.env.Stdout, rep)
			}
			printPrune(s.env.Stdout, rep)
			return nil
		},
	}
}

func (s *state) logsCmd() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print a conversation container's output",
		ArgsUsage: "ID",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new output"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ID")
			if err != nil {
				return err
			}
			return s.client().Logs(ctx, a[0], cmd.Bool("follow"), s.env.Stdout)
		},
	}
}

func (s *state) execCmd() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a conversation's container, with ohctl's standard input as its own",
		ArgsUsage: "ID -- CMD...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "user", Usage: "run as this uid[:gid] (default: the conversation's user)"},
			&cli.StringFlag{Name: "workdir", Usage: "run in this absolute directory inside the container (default: the conversation's working directory)"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a terminal, as docker exec -it does: ohctl's standard input must be a terminal, which is in raw mode until the command exits"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a := cmd.Args().Slice()
			if len(a) < 2 {
				return usagef("exec takes a conversation id and a command: ohctl exec ID -- CMD...")
			}
			req := control.ExecRequest{Cmd: a[1:], User: cmd.String("user"), WorkDir: cmd.String("workdir")}
			var err error
			var code int
			if cmd.Bool("tty") {
				code, err = s.execTTY(ctx, a[0], req)
			} else {
				code, err = s.client().Exec(ctx, a[0], req, s.env.Stdin, s.env.Stdout, s.env.Stderr)
			}
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
}

func (s *state) doctorCmd() *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "check that worktrees, containers and brokers are healthy",
		ArgsUsage: "[ID]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "repair", Usage: "fix what can be fixed from the host, and say what was done"},
			&cli.StringFlag{Name: "repo", Usage: "examine this repository (managed by ohd or not) for registrations of worktrees that do not exist on the host"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a := cmd.Args().Slice()
			if len(a) > 1 {
				return usagef("doctor takes at most one conversation id")
			}
			id := ""
			if len(a) == 1 {
				id = a[0]
			}
			repo := cmd.String("repo")
			if repo != "" && id != "" {
				return usagef("doctor takes a conversation id or --repo, not both")
			}
			if repo != "" && !filepath.IsAbs(repo) {
				abs, err := filepath.Abs(repo)
				if err != nil {
					return err
				}
				repo = abs
			}
			var rep control.DoctorReport
			var err error
			if repo != "" {
				rep, err = s.client().DoctorRepo(ctx, repo, cmd.Bool("repair"))
			} else {
				rep, err = s.client().Doctor(ctx, id, cmd.Bool("repair"))
			}
			if err != nil {
				return err
			}
			if home := s.env.Getenv("HOME"); id == "" && home != "" {
				// The user's global config is under their HOME: without
				// one there is none to check.
				rep.Checks = append(rep.Checks, bareRepositoryCheck(ctx, home, s.env.Getenv("XDG_CONFIG_HOME")))
			}
			if s.json {
				if err := printJSON(s.env.Stdout, rep); err != nil {
					return err
				}
			} else {
				printDoctor(s.env.Stdout, rep)
			}
			if !rep.OK() {
				return exitError{ExitError}
			}
			return nil
		},
	}
}

func (s *state) secretCmd() *cli.Command {
	return &cli.Command{
		Name:  "secret",
		Usage: "manage secrets (values are read from standard input, never from the command line)",
		Commands: []*cli.Command{
			{
				Name: "set", Usage: "store a secret; the value is read from standard input", ArgsUsage: "NAME",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "NAME")
					if err != nil {
						return err
					}
					value, err := io.ReadAll(io.LimitReader(s.env.Stdin, store.MaxSecretSize+1))
					if err != nil {
						return err
					}
					// A value typed or echoed ends with one newline that is
					// not part of it.
					value = trimOneNewline(value)
					if len(value) == 0 {
						return usagef("secret set %s: standard input is empty: pipe the value, e.g. `printf %%s \"$TOKEN\" | ohctl secret set %s`", a[0], a[0])
					}
					if err := s.client().SetSecret(ctx, a[0], value); err != nil {
						return err
					}
					return s.done(map[string]string{"name": a[0]}, "secret %s stored", a[0])
				},
			},
			{
				Name: "ls", Usage: "list secrets (names only)",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					l, err := s.client().Secrets(ctx)
					if err != nil {
						return err
					}
					if s.json {
						return printJSON(s.env.Stdout, nonNil(l))
					}
					t := newTable(s.env.Stdout, "NAME", "SIZE", "UPDATED")
					for _, x := range l {
						t.row(x.Name, fmt.Sprintf("%d B", x.Size), ago(s.env.Now(), x.UpdatedAt))
					}
					return t.flush()
				},
			},
			{
				Name: "rm", Usage: "delete a secret", ArgsUsage: "NAME",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "NAME")
					if err != nil {
						return err
					}
					if err := s.client().RemoveSecret(ctx, a[0]); err != nil {
						return err
					}
					return s.done(map[string]string{"name": a[0]}, "secret %s deleted", a[0])
				},
			},
		},
	}
}

func trimOneNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}

// done prints a JSON object or a sentence.
func (s *state) done(v any, format string, args ...any) error {
	if s.json {
		return printJSON(s.env.Stdout, v)
	}
	_, err := fmt.Fprintf(s.env.Stdout, format+"\n", args...)
	return err
}

func (s *state) grantCmd() *cli.Command {
	return &cli.Command{
		Name: "grant", Usage: "let a conversation use a secret, git host, LLM profile, OAuth server, MCP server or network destination", ArgsUsage: "ID KIND NAME",
		Description: "KIND is secret, git, llm, oauth, mcp or net. A git NAME is host[/path/prefix]: git reaches it through the broker's relay, which\n" +
			"injects the credential, and a push may create or update only the conversation's own branches: refs/heads/openhands/<ID> and below,\n" +
			"and new branches under refs/heads/openhands/ it creates (--push widens that). A net NAME is HOST[:PORT]\n" +
			"(port 443 when absent), *.example.com[:PORT] for that domain's hosts, or IP:PORT: the container may open\n" +
			"connections to it through its broker (a revoke takes effect at the next connection). MCP servers are made by the conversation API from a create body's mcp_config.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "push", Usage: "git: a ref pattern a push may also create or update, whoever made the ref, e.g. 'refs/heads/feature/*' (* matches any characters; repeatable)"},
			&cli.BoolFlag{Name: "git-relay", Value: true, Usage: "git: reach the host through the broker's relay (the token stays on the host); false hands the token to git's credential helper in the container, with no push policy"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ID", "KIND", "NAME")
			if err != nil {
				return err
			}
			req := control.GrantRequest{Kind: a[1], Name: a[2], Push: cmd.StringSlice("push")}
			if cmd.IsSet("git-relay") {
				v := cmd.Bool("git-relay")
				req.GitRelay = &v
			}
			if a[1] != store.KindGit && (len(req.Push) > 0 || req.GitRelay != nil) {
				return usagef("--push and --git-relay apply to git grants only")
			}
			c, err := s.client().GrantWith(ctx, a[0], req)
			if err != nil {
				return err
			}
			return s.done(c, "granted %s %s to %s", a[1], a[2], a[0])
		},
	}
}

func (s *state) revokeCmd() *cli.Command {
	return &cli.Command{
		Name: "revoke", Usage: "take a grant back", ArgsUsage: "ID KIND NAME",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := args(cmd, "ID", "KIND", "NAME")
			if err != nil {
				return err
			}
			c, err := s.client().Revoke(ctx, a[0], a[1], a[2])
			if err != nil {
				return err
			}
			return s.done(c, "revoked %s %s from %s", a[1], a[2], a[0])
		},
	}
}

func (s *state) auditCmd() *cli.Command {
	return &cli.Command{
		Name: "audit", Usage: "show the audit log (who used which credential)", ArgsUsage: "[ID]",
		Flags: []cli.Flag{&cli.IntFlag{Name: "limit", Value: 200, Usage: "show the newest N records (0: all)"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a := cmd.Args().Slice()
			if len(a) > 1 {
				return usagef("audit takes at most one conversation id")
			}
			id := ""
			if len(a) == 1 {
				id = a[0]
			}
			recs, err := s.client().Audit(ctx, id, int(cmd.Int("limit")))
			if err != nil {
				return err
			}
			if s.json {
				return printJSON(s.env.Stdout, nonNil(recs))
			}
			printAudit(s.env.Stdout, recs)
			return nil
		},
	}
}

func (s *state) tokenCmd() *cli.Command {
	return &cli.Command{
		Name: "token", Usage: "manage broker tokens",
		Commands: []*cli.Command{{
			Name: "rotate", Usage: "issue a new broker token; the old one stops working at once", ArgsUsage: "ID",
			Action: func(ctx context.Context, cmd *cli.Command) error {
				a, err := args(cmd, "ID")
				if err != nil {
					return err
				}
				c, err := s.client().RotateToken(ctx, a[0])
				if err != nil {
					return err
				}
				return s.done(c, "token of %s rotated (epoch %d)", a[0], c.BrokerEpoch)
			},
		}},
	}
}

func (s *state) gitHostCmd() *cli.Command {
	return &cli.Command{
		Name: "git-host", Usage: "configure the credential the broker answers for a git host",
		Commands: []*cli.Command{
			{
				Name: "set", ArgsUsage: "[SCHEME://]HOST[:PORT]", Usage: "answer HOST with a username and the password held in a secret (https by default; http:// for a loopback test server only)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "username", Value: "x-access-token", Usage: "username git sends"},
					&cli.StringFlag{Name: "secret", Required: true, Usage: "name of the secret holding the password or token"},
					&cli.StringFlag{Name: "auth", Value: "basic", Usage: "how the relay sends the token: basic (username and token) or bearer (Authorization: Bearer)"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "HOST")
					if err != nil {
						return err
					}
					g := store.GitCredential{Host: a[0], Username: cmd.String("username"), Secret: cmd.String("secret"), Auth: cmd.String("auth")}
					if scheme, host, ok := strings.Cut(a[0], "://"); ok {
						g.Scheme, g.Host = scheme, strings.TrimSuffix(host, "/")
					}
					if err := s.client().PutGitCredential(ctx, g); err != nil {
						return err
					}
					return s.done(g, "git host %s answered as %s with secret %s", g.Host, g.Username, g.Secret)
				},
			},
			{
				Name: "ls", Usage: "list git hosts",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					l, err := s.client().GitCredentials(ctx)
					if err != nil {
						return err
					}
					if s.json {
						return printJSON(s.env.Stdout, nonNil(l))
					}
					t := newTable(s.env.Stdout, "HOST", "USERNAME", "SECRET", "AUTH")
					for _, g := range l {
						host, auth := g.Host, "basic"
						if g.Scheme != "" {
							host = g.Scheme + "://" + host
						}
						if g.Auth != "" {
							auth = g.Auth
						}
						t.row(host, g.Username, g.Secret, auth)
					}
					return t.flush()
				},
			},
			{
				Name: "rm", ArgsUsage: "HOST", Usage: "forget a git host",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "HOST")
					if err != nil {
						return err
					}
					if err := s.client().RemoveGitCredential(ctx, a[0]); err != nil {
						return err
					}
					return s.done(map[string]string{"host": a[0]}, "git host %s removed", a[0])
				},
			},
		},
	}
}

func (s *state) llmCmd() *cli.Command {
	return &cli.Command{
		Name: "llm", Usage: "configure LLM profiles (the API key stays on the host; the broker injects it)",
		Commands: []*cli.Command{
			{
				Name: "set", ArgsUsage: "NAME", Usage: "create or replace a profile",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "model", Usage: "model name"},
					&cli.StringFlag{Name: "base-url", Required: true, Usage: "provider base URL, e.g. https://api.openai.com/v1"},
					&cli.StringFlag{Name: "key-secret", Required: true, Usage: "name of the secret holding the API key"},
					&cli.StringFlag{Name: "auth-header", Usage: "header carrying the key (default Authorization: Bearer; e.g. x-api-key)"},
					&cli.BoolFlag{Name: "allow-disclosure", Usage: "let granted conversations read the key itself (default: injection only)"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "NAME")
					if err != nil {
						return err
					}
					p := store.LLMProfile{
						Name: a[0], Model: cmd.String("model"), BaseURL: cmd.String("base-url"), KeySecret: cmd.String("key-secret"),
						AuthHeader: cmd.String("auth-header"), AllowDisclosure: cmd.Bool("allow-disclosure"),
					}
					if err := s.client().PutLLMProfile(ctx, p); err != nil {
						return err
					}
					return s.done(p, "llm profile %s set", p.Name)
				},
			},
			{
				Name: "ls", Usage: "list profiles",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					l, err := s.client().LLMProfiles(ctx)
					if err != nil {
						return err
					}
					if s.json {
						return printJSON(s.env.Stdout, nonNil(l))
					}
					t := newTable(s.env.Stdout, "NAME", "MODEL", "BASE URL", "KEY SECRET", "DISCLOSURE")
					for _, p := range l {
						t.row(p.Name, p.Model, p.BaseURL, p.KeySecret, yesNo(p.AllowDisclosure))
					}
					return t.flush()
				},
			},
			{
				Name: "rm", ArgsUsage: "NAME", Usage: "delete a profile",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "NAME")
					if err != nil {
						return err
					}
					if err := s.client().RemoveLLMProfile(ctx, a[0]); err != nil {
						return err
					}
					return s.done(map[string]string{"name": a[0]}, "llm profile %s removed", a[0])
				},
			},
		},
	}
}

func (s *state) oauthCmd() *cli.Command {
	return &cli.Command{
		Name: "oauth", Usage: "configure OAuth servers (tokens are refreshed on the host; refresh tokens never leave it)",
		Commands: []*cli.Command{
			{
				Name: "set", ArgsUsage: "NAME", Usage: "create or replace a server; a refresh token is read from standard input when --refresh-token-stdin is given",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "token-url", Required: true, Usage: "the token endpoint"},
					&cli.StringFlag{Name: "client-id", Usage: "OAuth client id"},
					&cli.StringFlag{Name: "client-secret", Usage: "name of the secret holding the client secret"},
					&cli.BoolFlag{Name: "refresh-token-stdin", Usage: "read the refresh token from standard input"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "NAME")
					if err != nil {
						return err
					}
					req := control.OAuthServerRequest{OAuthServer: store.OAuthServer{
						Name: a[0], TokenURL: cmd.String("token-url"), ClientID: cmd.String("client-id"), ClientSecret: cmd.String("client-secret"),
					}}
					if cmd.Bool("refresh-token-stdin") {
						b, err := io.ReadAll(io.LimitReader(s.env.Stdin, store.MaxSecretSize))
						if err != nil {
							return err
						}
						if req.RefreshToken = trimOneNewline(b); len(req.RefreshToken) == 0 {
							return usagef("oauth set %s: standard input is empty", a[0])
						}
					}
					if err := s.client().PutOAuthServer(ctx, req); err != nil {
						return err
					}
					return s.done(map[string]string{"name": a[0]}, "oauth server %s set", a[0])
				},
			},
			{
				Name: "ls", Usage: "list servers",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					l, err := s.client().OAuthServers(ctx)
					if err != nil {
						return err
					}
					if s.json {
						return printJSON(s.env.Stdout, nonNil(l))
					}
					t := newTable(s.env.Stdout, "NAME", "TOKEN URL", "CLIENT ID", "ACCESS EXPIRES")
					for _, o := range l {
						exp := "-"
						if !o.Expiry.IsZero() {
							exp = o.Expiry.UTC().Format("2006-01-02 15:04:05Z")
						}
						t.row(o.Name, o.TokenURL, o.ClientID, exp)
					}
					return t.flush()
				},
			},
			{
				Name: "rm", ArgsUsage: "NAME", Usage: "delete a server and its tokens",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					a, err := args(cmd, "NAME")
					if err != nil {
						return err
					}
					if err := s.client().RemoveOAuthServer(ctx, a[0]); err != nil {
						return err
					}
					return s.done(map[string]string{"name": a[0]}, "oauth server %s removed", a[0])
				},
			},
		},
	}
}

func (s *state) versionCmd() *cli.Command {
	return &cli.Command{
		Name: "version", Usage: "print ohctl's version and the daemon's (exit status 1 when the daemon does not answer)",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			v, err := s.client().Version(ctx)
			out := map[string]any{"ohctl": version.Version}
			if err == nil {
				out["ohd"] = v
			}
			if s.json {
				if err := printJSON(s.env.Stdout, out); err != nil {
					return err
				}
				return err
			}
			fmt.Fprintf(s.env.Stdout, "ohctl %s\n", version.Version)
			if err != nil {
				// Like docker version: a daemon that does not answer is an
				// error, so the command works as a readiness probe.
				fmt.Fprintf(s.env.Stdout, "ohd   unreachable\n")
				return err
			}
			fmt.Fprintf(s.env.Stdout, "ohd   %s (api %s, runtime %s, state %s)\n", v.Version, v.APIVersion, v.Runtime, v.StateDir)
			return nil
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
