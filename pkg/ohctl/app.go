package ohctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/version"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Env is what a command sees of its process: streams, environment and
// clock, injected so tests can run commands in-process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Now            func() time.Time
}

// exitError carries a specific exit code (exec passes the command's).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Main runs ohctl with args (args[0] is the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Stdin == nil {
		env.Stdin = os.Stdin
	}
	app := newApp(&env)
	err := app.Run(ctx, args)
	if err == nil {
		return ExitOK
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(env.Stderr, "ohctl: %v\n", err)
		return ExitUsage
	}
	var ce *control.Error
	if errors.As(err, &ce) {
		fmt.Fprintf(env.Stderr, "ohctl: %s\n", ce.Message)
		return ExitError
	}
	fmt.Fprintf(env.Stderr, "ohctl: %v\n", err)
	return ExitError
}

// state is shared by the commands of one run.
type state struct {
	env  *Env
	json bool
	sock string
}

func (s *state) client() *control.Client { return control.NewClient(s.sock) }

func newApp(env *Env) *cli.Command {
	s := &state{env: env}
	return &cli.Command{
		Name:                  "ohctl",
		Usage:                 "inspect, repair and prune ohd's conversations",
		Version:               version.Version,
		Writer:                env.Stdout,
		ErrWriter:             env.Stderr,
		Reader:                env.Stdin,
		EnableShellCompletion: true,
		Suggest:               true,
		HideHelpCommand:       true,
		ExitErrHandler:        func(context.Context, *cli.Command, error) {},
		OnUsageError: func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return usagef("%v (see ohctl --help)", err)
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Usage: "ohd's control socket (default: $OHD_CONTROL_SOCKET, else /run/ohd/ohd.sock as root or $XDG_RUNTIME_DIR/ohd/ohd.sock)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
		},
		Before: func(ctx context.Context, cmd *cli.Command) (context.Context, error) {
			s.json = cmd.Bool("json")
			s.sock = cmd.String("socket")
			if s.sock == "" {
				s.sock = control.DefaultSocket(env.Getenv)
			}
			return ctx, nil
		},
		Commands: []*cli.Command{
			s.lsCmd(), s.showCmd(), s.createCmd(), s.rmCmd(), s.restoreCmd(), s.pruneCmd(), s.logsCmd(), s.execCmd(),
			s.doctorCmd(), s.secretCmd(), s.grantCmd(), s.revokeCmd(), s.auditCmd(), s.tokenCmd(),
			s.gitHostCmd(), s.llmCmd(), s.oauthCmd(),
			s.gitCredentialCmd(), s.innerExecCmd(), s.limitCmd(), s.viewCmd(), s.versionCmd(),
		},
	}
}

// args checks the number of positional arguments.
func args(cmd *cli.Command, names ...string) ([]string, error) {
	a := cmd.Args().Slice()
	if len(a) != len(names) {
		return nil, usagef("%s takes %d argument(s) (%v), got %d: see ohctl %s --help", cmd.Name, len(names), names, len(a), cmd.Name)
	}
	return a, nil
}
