package conversation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/safetar"
	"github.com/ohd-dev/ohd/pkg/store"
)

// innerOfPreviousRelease maps where the agent server kept its state in a
// container of the releases before schema 3 (no inner state mounts, no
// OH_* paths: its defaults, relative to the image's WORKDIR; paths.go) to
// the host directory that holds it now.
func innerOfPreviousRelease(d openhands.InnerDirs) [][2]string {
	return [][2]string{
		{"workspace/conversations", d.Conversations},
		{"workspace/.openhands", d.Persistence},
		{"workspace/bash_events", d.BashEvents},
	}
}

// upgradeInner makes a conversation of the previous release
// (InnerInContainer) ready for a container of this one: it stops its old
// container, copies the inner server's state out of it (the Engine API's
// archive endpoint; the archive is the agent's, extracted with
// safetar) into the host directories, removes the old container and
// gives the record the image ohd is configured with (the previous
// release's image was made for the previous contract). The record keeps
// InnerInContainer until a container of this release has started (doStart
// clears it), so a start that fails after the copy copies nothing twice.
// A failed copy changes nothing: the old container and its state stay.
func (m *Manager) upgradeInner(ctx context.Context, c store.Conversation) (store.Conversation, error) {
	img, err := m.rt.ResolveImage(ctx, m.cfg.Image)
	if err != nil {
		return c, fmt.Errorf("upgrade from the previous release: image: %w", err)
	}
	note := ""
	if c.ContainerID != "" {
		if note, err = m.copyInnerOut(ctx, c); err != nil {
			return c, fmt.Errorf("upgrade from the previous release: %w", err)
		}
		m.retire(c.ContainerID)
		if err := m.rt.Remove(ctx, c.ContainerID); err != nil {
			return c, fmt.Errorf("upgrade from the previous release: remove its container: %w", err)
		}
		m.log.Info("conversation of the previous release: inner state copied out of its container", "id", c.ID, "copied", note)
	}
	return m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		r.ContainerID, r.HostPort = "", 0
		r.Image, r.ImageID = img.Ref, img.ID
		if note != "" {
			r.Notes = append(r.Notes, "made by the previous release: "+note+"; its container is made anew with "+img.Ref)
		}
		return nil
	})
}

// copyInnerOut copies the inner state of c's old container into c's host
// directories through a staging directory beside them, so a refused or
// failed copy leaves them as they were. A host directory that already
// holds files (a copy before a crash) is kept.
func (m *Manager) copyInnerOut(ctx context.Context, c store.Conversation) (string, error) {
	arch, ok := m.rt.(runtime.Archiver)
	if !ok {
		return "", fmt.Errorf("the %s runtime cannot read a container's files", m.rt.Kind())
	}
	m.retire(c.ContainerID)
	if err := m.rt.Stop(ctx, c.ContainerID, m.cfg.StopTimeout); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return "", fmt.Errorf("stop its container: %w", err)
	}
	ins, err := m.rt.Inspect(ctx, c.ContainerID)
	if errors.Is(err, runtime.ErrNotFound) {
		return "its container was gone: no inner state to copy", nil
	}
	if err != nil {
		return "", err
	}
	wd := ins.WorkingDir
	if wd == "" {
		wd = "/"
	}
	d := openhands.DirsOf(m.cfg.InnerRoot, c.ID)
	stage, err := os.MkdirTemp(d.Root, ".upgrade-")
	if err != nil {
		return "", fmt.Errorf("inner state: %w", err)
	}
	defer os.RemoveAll(stage)
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		uid, gid = agentOf(c)
	}
	var total safetar.Result
	var staged [][2]string
	for _, p := range innerOfPreviousRelease(d) {
		src := path.Join(wd, p[0])
		sub := filepath.Join(stage, filepath.Base(p[1]))
		rc, err := arch.Archive(ctx, c.ContainerID, src)
		if errors.Is(err, runtime.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		if err = os.Mkdir(sub, 0o700); err == nil && uid >= 0 {
			err = os.Lchown(sub, uid, gid)
		}
		var res safetar.Result
		// The limits hold for the three directories together.
		leftBytes := safetar.DefaultMaxBytes - total.Bytes
		leftEntries := safetar.DefaultMaxEntries - total.Files - total.Dirs - total.SkippedCount
		if err == nil && (leftBytes <= 0 || leftEntries <= 0) {
			err = fmt.Errorf("%w: more than %d bytes or %d entries in all", safetar.ErrRefused, int64(safetar.DefaultMaxBytes), safetar.DefaultMaxEntries)
		}
		if err == nil {
			res, err = safetar.Extract(rc, sub, safetar.Options{
				Prefix: path.Base(src), UID: uid, GID: gid, MaxBytes: leftBytes, MaxEntries: leftEntries,
			})
		}
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("copy %s out of its container: %w (the old container and its state are kept; copy it with docker cp and remove the container, or remove the conversation)", src, err)
		}
		total.Files += res.Files
		total.Dirs += res.Dirs
		total.Bytes += res.Bytes
		total.SkippedCount += res.SkippedCount
		staged = append(staged, [2]string{sub, p[1]})
	}
	for _, s := range staged {
		if err := os.Remove(s[1]); err != nil && !errors.Is(err, os.ErrNotExist) {
			continue // it holds files already: a copy before a crash
		}
		if err := os.Rename(s[0], s[1]); err != nil {
			return "", fmt.Errorf("inner state: %w", err)
		}
	}
	note := fmt.Sprintf("%d files (%d bytes) of its inner server's state copied out of its container", total.Files, total.Bytes)
	if total.SkippedCount > 0 {
		note += fmt.Sprintf(", %d links or special files skipped", total.SkippedCount)
	}
	return note, nil
}
