package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "attacktool" && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	if name == "net" {
		os.Exit(netTool(args))
	}
	flags, rest := splitFlags(args)
	failed := false
	fail := func(err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			failed = true
		}
	}
	switch name {
	case "rm":
		for _, p := range rest {
			if strings.Contains(flags, "r") {
				fail(os.RemoveAll(p))
			} else if err := os.Remove(p); err != nil && !(strings.Contains(flags, "f") && os.IsNotExist(err)) {
				fail(err)
			}
		}
	case "ln":
		if len(rest) != 2 {
			fail(fmt.Errorf("want TARGET LINK"))
			break
		}
		if strings.Contains(flags, "f") {
			_ = os.Remove(rest[1])
		}
		fail(os.Symlink(rest[0], rest[1]))
	case "mv":
		if len(rest) != 2 {
			fail(fmt.Errorf("want SRC DST"))
			break
		}
		fail(os.Rename(rest[0], rest[1]))
	case "mkdir":
		for _, p := range rest {
			if strings.Contains(flags, "p") {
				fail(os.MkdirAll(p, 0o755))
			} else {
				fail(os.Mkdir(p, 0o755))
			}
		}
	case "cp":
		if len(rest) < 2 {
			fail(fmt.Errorf("want SRC... DST"))
			break
		}
		dst := rest[len(rest)-1]
		for _, src := range rest[:len(rest)-1] {
			to := dst
			if st, err := os.Stat(dst); err == nil && st.IsDir() {
				to = filepath.Join(dst, filepath.Base(src))
			}
			fail(copyFile(src, to))
		}
	case "cat":
		if len(rest) == 0 {
			_, err := io.Copy(os.Stdout, os.Stdin)
			fail(err)
		}
		for _, p := range rest {
			b, err := os.ReadFile(p)
			fail(err)
			os.Stdout.Write(b)
		}
	case "ls":
		for _, p := range rest {
			ents, err := os.ReadDir(p)
			fail(err)
			for _, e := range ents {
				fmt.Println(filepath.Join(p, e.Name()), e.Type())
			}
		}
	case "defacl":
		// defacl UID DIR...: give UID rwx in each directory's default
		// ACL (setfacl -d -m u:UID:rwx), so what anyone makes there
		// later is UID's to write.
		if len(args) < 2 {
			fail(fmt.Errorf("want UID DIR..."))
			break
		}
		uid, err := strconv.ParseUint(args[0], 10, 32)
		if err != nil {
			fail(err)
			break
		}
		for _, p := range args[1:] {
			fail(unix.Setxattr(p, "system.posix_acl_default", defaultACLFor(uint32(uid)), 0))
		}
	case "chmod":
		if len(args) < 2 {
			fail(fmt.Errorf("want MODE PATH..."))
			break
		}
		for _, p := range args[1:] {
			fail(chmod(args[0], p))
		}
	case "trunc":
		for _, root := range rest {
			fail(filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
				if err != nil || !e.Type().IsRegular() {
					return nil
				}
				_ = os.Chmod(p, 0o644)
				fail(os.Truncate(p, 0))
				return nil
			}))
		}
	case "findstr":
		fail(findstr(rest))
	default:
		fail(fmt.Errorf("unknown utility"))
	}
	if failed {
		os.Exit(1)
	}
}

// splitFlags separates leading single-dash flag letters from arguments.
func splitFlags(args []string) (string, []string) {
	var flags string
	for i, a := range args {
		if !strings.HasPrefix(a, "-") || a == "-" {
			return flags, args[i:]
		}
		flags += strings.TrimPrefix(a, "-")
	}
	return flags, nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm())
}

func chmod(mode, p string) error {
	if n, err := strconv.ParseUint(mode, 8, 32); err == nil {
		return os.Chmod(p, os.FileMode(n))
	}
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	m := st.Mode().Perm()
	switch mode {
	case "u+w":
		m |= 0o200
	case "+x":
		m |= 0o111
	default:
		return fmt.Errorf("mode %q: use octal, u+w or +x", mode)
	}
	return os.Chmod(p, m)
}

// defaultACLFor is the kernel's encoding (version 2, entries of tag, perm
// and id, sorted) of u::rwx g::r-x o::r-x u:UID:rwx m::rwx.
func defaultACLFor(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range [][3]uint32{{0x01, 7, 0xFFFFFFFF}, {0x02, 7, uid}, {0x04, 5, 0xFFFFFFFF}, {0x10, 7, 0xFFFFFFFF}, {0x20, 5, 0xFFFFFFFF}} {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}
