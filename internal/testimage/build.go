package testimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/moby/moby/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// engine is the handful of Docker Engine calls the build makes.
type engine struct {
	cli *client.Client
}

// newEngine connects to the engine at DOCKER_HOST (or the default socket).
func newEngine() (*engine, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("testimage: docker client: %w", err)
	}
	return &engine{cli: cli}, nil
}

func (e *engine) Close() error { return e.cli.Close() }

// imageLabel returns the image ID ref names and its inputs label; both are
// "" when there is no such image (or it cannot be inspected, which a
// rebuild will then report properly).
func (e *engine) imageLabel(ctx context.Context, ref string) (id, digest string) {
	img, err := e.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", ""
	}
	if img.Config != nil {
		digest = img.Config.Labels[LabelInputs]
	}
	return img.ID, digest
}

// arch returns the engine's architecture in Go's terms (amd64, arm64).
func (e *engine) arch(ctx context.Context) (string, error) {
	v, err := e.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return "", fmt.Errorf("testimage: docker version: %w", err)
	}
	switch v.Arch {
	case "x86_64":
		return "amd64", nil
	case "aarch64":
		return "arm64", nil
	}
	return v.Arch, nil
}

// importImage imports the root filesystem tar read from r as ref with the
// given changes, and returns the new image's ID.
func (e *engine) importImage(ctx context.Context, r io.Reader, ref, arch string, changes []string) (string, error) {
	res, err := e.cli.ImageImport(ctx,
		client.ImageImportSource{Source: r, SourceName: "-"},
		ref,
		client.ImageImportOptions{
			Message:  "ohd test image (internal/testimage)",
			Changes:  changes,
			Platform: ocispec.Platform{OS: "linux", Architecture: arch},
		})
	if err != nil {
		return "", fmt.Errorf("testimage: docker import %s: %w", ref, err)
	}
	defer res.Close()
	// The answer is a stream of JSON progress messages; a failure arrives
	// as one with "error" set, after a 200.
	dec := json.NewDecoder(res)
	for {
		var msg struct {
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("testimage: docker import %s: reading the answer: %w", ref, err)
		}
		if msg.Error != "" {
			return "", fmt.Errorf("testimage: docker import %s: %s", ref, msg.Error)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return "", fmt.Errorf("testimage: docker import %s: %s", ref, msg.ErrorDetail.Message)
		}
	}
	id, _ := e.imageLabel(ctx, ref)
	if id == "" {
		return "", fmt.Errorf("testimage: docker import %s: the engine reported success but has no such image", ref)
	}
	return id, nil
}

// removeImage removes the image id, ignoring failure (a container may still
// use it; then it stays as an untagged image).
func (e *engine) removeImage(ctx context.Context, id string) {
	_, _ = e.cli.ImageRemove(ctx, id, client.ImageRemoveOptions{})
}

// build compiles the Go binaries, streams the root filesystem into the
// engine and tags the result ref with the inputs label digest. It returns
// the new image ID.
func build(ctx context.Context, eng *engine, root string, lay *layout, ref, digest string) (string, error) {
	arch, err := eng.arch(ctx)
	if err != nil {
		return "", err
	}
	if arch != runtime.GOARCH {
		return "", fmt.Errorf("%w: the engine runs %s and this host %s; the image copies the host's git", ErrUnsupportedHost, arch, runtime.GOARCH)
	}
	tmp, err := os.MkdirTemp("", "ohd-test-image-")
	if err != nil {
		return "", fmt.Errorf("testimage: %w", err)
	}
	defer os.RemoveAll(tmp)

	full := lay.clone()
	for _, b := range []struct{ pkg, name string }{{standinPkg, "standin"}, {ohctlPkg, "ohctl"}} {
		out := filepath.Join(tmp, b.name)
		if _, err := goOutput(ctx, root, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch},
			"go build "+b.pkg+" (the image ships it as /usr/local/bin/"+b.name+")",
			"build", "-trimpath", "-ldflags=-s -w", "-o", out, b.pkg); err != nil {
			return "", err
		}
		if err := full.add(&entry{Path: "/usr/local/bin/" + b.name, Kind: kindFile, Mode: 0o755, Src: out}); err != nil {
			return "", err
		}
	}

	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := writeTar(pw, full.sorted())
		pw.CloseWithError(err)
		written <- err
	}()
	id, importErr := eng.importImage(ctx, pr, ref, arch, imageChanges(lay, digest))
	pr.CloseWithError(errors.New("import finished")) // unblock the writer if the import stopped reading
	if err := <-written; err != nil && importErr != nil {
		return "", err // the tar's own failure is the cause
	}
	if importErr != nil {
		return "", importErr
	}
	return id, nil
}

// tarTime is every entry's modification time, so the tar depends only on
// its contents.
var tarTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// writeTar writes entries (sorted, parents first) as a tar stream owned by
// root.
func writeTar(w io.Writer, entries []*entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if e.Path == "/" {
			continue
		}
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(e.Path, "/"),
			Mode:    int64(e.Mode.Perm()),
			ModTime: tarTime,
			Uname:   "root",
			Gname:   "root",
			Uid:     e.UID,
			Gid:     e.UID,
			Format:  tar.FormatPAX,
		}
		if e.UID != 0 {
			hdr.Uname, hdr.Gname = "", ""
		}
		if e.Mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000 // c_ISVTX
		}
		var src *os.File
		switch e.Kind {
		case kindDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case kindSymlink:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.Link
		case kindFile:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.Data))
			if e.Src != "" {
				f, err := os.Open(e.Src)
				if err != nil {
					return fmt.Errorf("testimage: %w", err)
				}
				st, err := f.Stat()
				if err != nil {
					f.Close()
					return fmt.Errorf("testimage: %w", err)
				}
				hdr.Size = st.Size()
				src = f
			}
		default:
			return fmt.Errorf("testimage: %s: unknown entry kind %d", e.Path, e.Kind)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			if src != nil {
				src.Close()
			}
			return fmt.Errorf("testimage: tar %s: %w", e.Path, err)
		}
		if e.Kind == kindFile {
			var err error
			if src != nil {
				_, err = io.CopyN(tw, src, hdr.Size)
				src.Close()
			} else {
				_, err = tw.Write(e.Data)
			}
			if err != nil {
				return fmt.Errorf("testimage: tar %s: %w", e.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("testimage: tar: %w", err)
	}
	return nil
}
