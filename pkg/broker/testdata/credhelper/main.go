// Command credhelper is git's credential helper on the broker, as ohctl
// git-credential runs it in a container; the tests build it with
// CGO_ENABLED=0 and run it in an empty chroot.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/ohd-dev/ohd/pkg/broker"
)

func main() {
	action := ""
	if len(os.Args) > 1 {
		action = os.Args[1]
	}
	if err := broker.GitCredentialHelper(context.Background(), action, os.Stdin, os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "credhelper:", err)
		os.Exit(1)
	}
}
