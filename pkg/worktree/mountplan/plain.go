package mountplan

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A plain folder (a workspace that is not itself in a git work tree: a
// folder of projects, say) is the agent's to write, but the repositories
// in it are the user's, who will run git in them: a hook or an fsmonitor
// the agent wrote into one's git dir would run on the host. So each
// repository found in it is protected as a submodule is in place:
//
//	<Folder>                        read-write  the folder
//	<Folder>/.../<repo>             read-write  each repository's directory
//	                                            and every directory above it,
//	                                            onto itself: a mount point
//	                                            cannot be renamed or removed,
//	                                            so the agent cannot move a
//	                                            repository away and put one
//	                                            of its own in its place
//	<Folder>/.../<repo>/.git        read-only   its git dir (or .git file)
//	                                            and its submodules (see
//	                                            submoduleMounts)
//	<Folder>/.../<name>.git         read-only   a bare repository, whole
//
// A repository's own work tree is not looked through: a repository inside
// it that is not one of its submodules is not the user's everyday git.
//
// Bounds: the folder's directories are walked once per container start, up
// to maxPlainDirs, and at most maxPlainRepos repositories are protected;
// beyond either the start is refused (a repository left unprotected would
// be the agent's to take).
const (
	maxPlainDirs  = 50000
	maxPlainRepos = 256
)

// PlainFolder returns the bind mounts of the plain folder ws (see
// above), parents before children. uid and gid own what it makes (a
// missing submodule directory).
func PlainFolder(h Host, ws string, uid, gid int) ([]Mount, error) {
	if err := CheckSource(ws); err != nil {
		return nil, fmt.Errorf("plain folder %s: %w", ws, err)
	}
	base := []Mount{{Source: ws, Target: ws}}
	var ptrs []Mount // pinned by Pin
	repos, dirs := 0, 0
	for stack := []string{ws}; len(stack) > 0; {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if dirs++; dirs > maxPlainDirs {
			return nil, fmt.Errorf("%w: the folder %s has more than %d directories to look through for git repositories, which ohd protects from the agent: choose the repository itself, or a smaller folder", ErrInvalidPath, ws, maxPlainDirs)
		}
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("plain folder %s: %w", ws, err)
		}
		names := map[string]fs.DirEntry{}
		for _, e := range ents {
			names[e.Name()] = e
		}
		if dir != ws && isBareRepo(names) {
			if repos++; repos > maxPlainRepos {
				return nil, tooManyRepos(ws)
			}
			ptrs = append(ptrs, Mount{Source: dir, Target: dir, ReadOnly: true})
			continue // the whole of it is read-only
		}
		if e, ok := names[".git"]; ok && dir != ws {
			if repos++; repos > maxPlainRepos {
				return nil, tooManyRepos(ws)
			}
			dg := filepath.Join(dir, ".git")
			if !e.IsDir() && !e.Type().IsRegular() {
				return nil, fmt.Errorf("%w: %s is a symlink or a special file, not a git dir or a .git file: ohd cannot keep the agent from pointing it elsewhere; choose the repository itself, or replace it with a .git file", ErrInvalidPath, dg)
			}
			ptrs = append(ptrs, Mount{Source: dg, Target: dg, ReadOnly: true})
			st, err := os.Lstat(dg)
			if err != nil {
				return nil, fmt.Errorf("plain folder %s: %w", ws, err)
			}
			if gd := submoduleGitDir(dir, dg, st); gd != "" {
				subs, err := submoduleMounts(h, dir, gd, uid, gid)
				if err != nil {
					return nil, fmt.Errorf("plain folder %s: %w", ws, err)
				}
				ptrs = append(ptrs, subs...)
			}
			continue // its own work tree is its own (submodules above)
		}
		for _, e := range ents {
			if e.IsDir() && e.Name() != ".git" {
				stack = append(stack, filepath.Join(dir, e.Name()))
			}
		}
	}
	mounts, err := Pin(base, ptrs)
	if err != nil {
		return nil, fmt.Errorf("plain folder %s: %w", ws, err)
	}
	return mounts, nil
}

// isBareRepo reports whether a directory with these entries is a git dir
// (a bare repository): HEAD, objects/ and refs/, as git itself tells one.
func isBareRepo(names map[string]fs.DirEntry) bool {
	head, objects, refs := names["HEAD"], names["objects"], names["refs"]
	return head != nil && head.Type().IsRegular() && objects != nil && objects.IsDir() && refs != nil && refs.IsDir()
}

func tooManyRepos(ws string) error {
	return fmt.Errorf("%w: the folder %s holds more than %d git repositories, each of which ohd protects from the agent: choose one repository, or a smaller folder", ErrInvalidPath, ws, maxPlainRepos)
}
