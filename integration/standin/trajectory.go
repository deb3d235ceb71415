package main

import (
	"archive/zip"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// GET /api/file/download-trajectory/{id} (file_router.py L870-892 @v1.43.1,
// ref §10 "Download trajectory"): a zip of <conversations_path>/<id.hex>/,
// entries named <id.hex>/... (relative to the conversations path: the
// directory itself first, then every file and directory in sorted order;
// _create_zip_from_directory L142-162), application/octet-stream, as
// attachment <id.hex>.zip; 404 {"detail":"Conversation not found"} when the
// directory is missing. (The real server also redacts LLM credentials in
// the JSON it zips; the stand-in's files hold none.)
func (s *Server) downloadTrajectory(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	hex := strings.ReplaceAll(id, "-", "")
	dir := filepath.Join(s.cfg.ConversationsPath, hex)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		writeDetail(w, http.StatusNotFound, "Conversation not found")
		return
	}
	var paths []string
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	sort.Strings(paths)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+hex+`.zip"`)
	zw := zip.NewWriter(w)
	defer zw.Close()
	_, _ = zw.Create(hex + "/")
	for _, p := range paths {
		rel, _ := filepath.Rel(s.cfg.ConversationsPath, p)
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if st.IsDir() {
			_, _ = zw.Create(filepath.ToSlash(rel) + "/")
			continue
		}
		if !st.Mode().IsRegular() {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if e, err := zw.CreateHeader(&zip.FileHeader{Name: filepath.ToSlash(rel), Method: zip.Deflate}); err == nil {
			_, _ = io.Copy(e, f)
		}
		f.Close()
	}
}
