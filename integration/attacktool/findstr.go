package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// findstr: see doc.go.
func findstr(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("want NEEDLE-B64R PATH...")
	}
	needle, err := base64.StdEncoding.DecodeString(args[0])
	if err != nil || len(needle) == 0 {
		return fmt.Errorf("the needle must be base64")
	}
	slices.Reverse(needle)
	files, hits := 0, 0
	check := func(p string) {
		f, err := os.Open(p)
		if err != nil {
			return
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 256<<20))
		if err != nil {
			return
		}
		files++
		if bytes.Contains(b, needle) {
			hits++
			fmt.Println("hit", p)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		check(p + "/environ")
		check(p + "/cmdline")
	}
	for _, root := range args[1:] {
		var st syscall.Stat_t
		if err := syscall.Stat(root, &st); err != nil {
			continue
		}
		dev := st.Dev
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if e.IsDir() {
				var ds syscall.Stat_t
				if syscall.Lstat(p, &ds) == nil && ds.Dev != dev {
					return filepath.SkipDir
				}
				return nil
			}
			if e.Type().IsRegular() {
				check(p)
			}
			return nil
		})
	}
	fmt.Printf("searched %d files, %d hits\n", files, hits)
	return nil
}
