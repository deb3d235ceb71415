package testimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Packages whose binaries the image ships, and this recipe's own package:
// the digest covers every source file of the module they are built from.
const (
	standinPkg = "./integration/standin"
	ohctlPkg   = "./cmd/ohctl"
	recipePkg  = "./internal/testimage"
)

// inputsDigest returns the hex SHA-256 over everything the image is made
// from: the Go version, go.mod and go.sum, every Go (and embedded) file of
// this module that the standin, ohctl or this recipe are built from, and
// every entry of the host layout with its content.
func inputsDigest(ctx context.Context, root string, lay *layout) (string, error) {
	h := sha256.New()
	goVersion, err := goOutput(ctx, root, nil, "go env GOVERSION", "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "go %s %s/%s\n", strings.TrimSpace(goVersion), "linux", runtime.GOARCH)
	for _, name := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, root, filepath.Join(root, name)); err != nil {
			return "", err
		}
	}

	// One line per package of this module: import path, directory, files.
	const format = `{{if .Module}}{{if .Module.Main}}{{.ImportPath}}` + "\t" + `{{.Dir}}` + "\t" +
		`{{join .GoFiles " "}} {{join .EmbedFiles " "}}` + "\n" + `{{end}}{{end}}`
	list, err := goOutput(ctx, root, []string{"GOOS=linux", "GOARCH=" + runtime.GOARCH, "CGO_ENABLED=0"},
		"listing the Go sources of "+standinPkg+" and "+ohctlPkg,
		"list", "-deps", "-f", format, standinPkg, ohctlPkg, recipePkg)
	if err != nil {
		return "", fmt.Errorf("%w (the image ships both programs: both must build)", err)
	}
	for line := range strings.Lines(list) {
		parts := strings.SplitN(strings.TrimRight(line, "\n"), "\t", 3)
		if len(parts) != 3 {
			continue
		}
		fmt.Fprintf(h, "package %s\n", parts[0])
		for _, f := range strings.Fields(parts[2]) {
			if err := hashFile(h, root, filepath.Join(parts[1], f)); err != nil {
				return "", err
			}
		}
	}

	for _, e := range lay.sorted() {
		fmt.Fprintf(h, "entry %q %d %o %q %d\n", e.Path, e.Kind, e.Mode, e.Link, e.UID)
		switch {
		case e.Src != "":
			if err := hashFile(h, "/", e.Src); err != nil {
				return "", err
			}
		case e.Data != nil:
			fmt.Fprintf(h, "data %d\n", len(e.Data))
			h.Write(e.Data)
		}
	}
	fmt.Fprintf(h, "changes %q\n", imageChanges(lay, ""))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile writes p's path (relative to base) and content digest into h.
func hashFile(h io.Writer, base, p string) error {
	sum, err := fileSum(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(base, p)
	if err != nil {
		rel = p
	}
	fmt.Fprintf(h, "file %q %x\n", rel, sum)
	return nil
}

// goOutput runs the go command in dir with env added and returns its
// standard output; what names the step in an error.
func goOutput(ctx context.Context, dir string, env []string, what string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("testimage: %s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// imageChanges are the Dockerfile instructions the import applies. An
// empty digest leaves the label out (for hashing the rest).
func imageChanges(lay *layout, digest string) []string {
	changes := []string{
		`CMD ["/usr/local/bin/standin"]`,
		"EXPOSE 8000/tcp",
		"ENV PATH=" + strings.Join(lay.path, ":"),
		// git needs a HOME it can read; /tmp is writable by every uid and
		// is the tmpfs in a read-only container.
		"ENV HOME=/tmp",
		"WORKDIR /",
	}
	if digest != "" {
		changes = append(changes, "LABEL "+LabelInputs+"="+digest)
	}
	return changes
}
