package runtime

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
)

// ResolveImage finds ref in the engine and returns its image ID. ohd never
// pulls: a missing image gives ErrNotFound with a hint to build or load it.
// Floating is set for a reference that can move (a "latest" tag, or no tag
// and no digest); pinning the ID at conversation creation keeps a later
// re-tag from changing a running conversation's image.
func (d *Docker) ResolveImage(ctx context.Context, ref string) (Image, error) {
	if ref == "" {
		return Image{}, fmt.Errorf("resolve image: %w: empty reference", ErrInvalidSpec)
	}
	res, err := d.api.ImageInspect(ctx, ref)
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
