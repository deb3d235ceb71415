package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moby/moby/client"

	cerrdefs "github.com/containerd/errdefs"
)

// ResolveImage finds ref in the engine and returns its image ID. A missing
// image named by a reference (not an ID) is pulled, with its progress in
// the log and in Pulls while it runs; when that fails too (no registry
// answers) the error is ErrNotFound, naming the image and how to load it.
// Floating is set for a reference that can move (a "latest" tag, or no tag
// and no digest); pinning the ID at conversation creation keeps a later
// re-tag from changing a running conversation's image.
func (d *Docker) ResolveImage(ctx context.Context, ref string) (Image, error) {
	return d.resolveImage(ctx, ref, true)
}

// InspectImage is ResolveImage without the pull: a missing image is
// ErrNotFound (see ImageInspector).
func (d *Docker) InspectImage(ctx context.Context, ref string) (Image, error) {
	return d.resolveImage(ctx, ref, false)
}

func (d *Docker) resolveImage(ctx context.Context, ref string, pull bool) (Image, error) {
	if ref == "" {
		return Image{}, fmt.Errorf("resolve image: %w: empty reference", ErrInvalidSpec)
	}
	res, err := d.api.ImageInspect(ctx, ref)
	if pull && err != nil && cerrdefs.IsNotFound(err) && !strings.HasPrefix(ref, "sha256:") {
		if perr := d.pull(ctx, ref); perr != nil {
			return Image{}, fmt.Errorf("resolve image %s: %w: pulling it failed (%s); %s", ref, ErrNotFound, scrubCredentials(perr.Error()), imageHint(ref))
		}
		res, err = d.api.ImageInspect(ctx, ref)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return Image{}, fmt.Errorf("resolve image %s: %w: %s", ref, ErrNotFound, imageHint(ref))
		}
		return Image{}, d.wrap("resolve image", ref, err)
	}
	id := res.ID
	img := Image{Ref: ref, ID: id, Floating: !isImageID(ref, id) && Floating(ref)}
	if res.Config != nil {
		img.Entrypoint, img.Cmd = res.Config.Entrypoint, res.Config.Cmd
	}
	return img, nil
}

// isImageID says ref names the image by (a prefix of) its ID.
func isImageID(ref, id string) bool {
	hex := strings.TrimPrefix(id, "sha256:")
	r := strings.TrimPrefix(ref, "sha256:")
	return len(r) >= 12 && strings.HasPrefix(hex, r)
}

// Floating reports whether an image reference can point at another image
// tomorrow: it has a "latest" tag, or no tag and no digest (which means
// latest). A reference with a digest ("name@sha256:...") is pinned.
//
// The grammar is Docker's: [registry[:port]/]path[:tag][@digest]; a colon
// before the last slash belongs to the registry's port.
func Floating(ref string) bool {
	if strings.Contains(ref, "@") {
		return false
	}
	name := ref
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	_, tag, ok := strings.Cut(name, ":")
	return !ok || tag == "" || tag == "latest"
}

// HasImage reports whether the engine has ref, without pulling it.
func (d *Docker) HasImage(ctx context.Context, ref string) (bool, error) {
	_, err := d.api.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, d.wrap("inspect image", ref, err)
}

// Pulls returns the image pulls in progress, oldest first: what a create
// waiting for its image is waiting for.
func (d *Docker) Pulls() []Pull { return d.pulls.list() }

// pullProgressEvery spaces the log lines of one layer's progress.
const pullProgressEvery = 5 * time.Second

// pull pulls ref, recording its progress for Pulls and logging each
// layer's status as it changes (and its progress every few seconds), and
// returns the pull's own error. ohd sends no registry credentials: the
// engine pulls what it can reach anonymously (or through its own mirror
// configuration).
func (d *Docker) pull(ctx context.Context, ref string) error {
	d.log.Info("pulling image: it is not in the engine", "image", ref)
	d.pulls.begin(ref)
	defer d.pulls.end(ref)
	resp, err := d.api.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	logged := map[string]time.Time{} // layer ID + status -> last line
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
		l := d.pulls.update(ref, msg)
		key := l.ID + "\x00" + l.Status
		if l.ID == "" {
			key = "\x00" + scrubCredentials(msg.Status)
		}
		if at, ok := logged[key]; ok && time.Since(at) < pullProgressEvery {
			continue
		}
		logged[key] = time.Now()
		attrs := []any{"image", ref, "status", cut(scrubCredentials(msg.Status), maxPullStatus)}
		if l.ID != "" {
			attrs = append(attrs, "layer", l.ID)
		}
		if l.Size > 0 {
			attrs = append(attrs, "done_bytes", l.Downloaded, "total_bytes", l.Size)
		}
		d.log.Info("pulling image", attrs...)
	}
	d.log.Info("pulled image", "image", ref)
	return nil
}
