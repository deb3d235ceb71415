package kubernetes

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// TestKubeCRIImageConfig: the node's containerd, asked over its CRI
// socket, gives the test image's entrypoint and command as Docker (where
// it was built) has them, with its image id; an image the node lacks is
// ErrNotFound saying how to import it. Control: the test image has an
// entrypoint and a command to compare (an empty answer would match an
// empty one).
func TestKubeCRIImageConfig(t *testing.T) {
	requireCluster(t)
	ref := loadImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, err := dockerImageConfig(t)(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Entrypoint)+len(want.Cmd) == 0 {
		t.Fatalf("control: Docker's %s has neither entrypoint nor command", ref)
	}
	got, err := criImageConfig(t)(ctx, ref)
	if err != nil {
		t.Fatalf("CRI ImageStatus of %s: %v", ref, err)
	}
	if !slices.Equal(got.Entrypoint, want.Entrypoint) || !slices.Equal(got.Cmd, want.Cmd) {
		t.Errorf("CRI: entrypoint %q cmd %q; Docker: entrypoint %q cmd %q", got.Entrypoint, got.Cmd, want.Entrypoint, want.Cmd)
	}
	if !strings.HasPrefix(got.ID, "sha256:") {
		t.Errorf("CRI image id = %q", got.ID)
	}
	_, err = criImageConfig(t)(ctx, "ohd-no-such-image:1")
	if !errors.Is(err, runtime.ErrNotFound) || !strings.Contains(err.Error(), "import") {
		t.Errorf("a missing image: %v, want ErrNotFound with a hint", err)
	}
}

// fakeCRI serves ImageStatus on a Unix socket as a CRI does (gRPC over
// HTTP/2 without TLS), answering with answer(ref); it returns the socket.
func fakeCRI(t *testing.T, answer func(w http.ResponseWriter, ref string)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Protocols: new(http.Protocols), ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/runtime.v1.ImageService/ImageStatus" || r.Header.Get("Content-Type") != "application/grpc" {
				w.Header().Set("Grpc-Status", "12")
				return
			}
			b, _ := io.ReadAll(r.Body)
			var ref string
			_ = protoFields(b[5:], func(n protowire.Number, v []byte) error {
				return protoFields(v, func(n protowire.Number, v []byte) error { ref = string(v); return nil })
			})
			answer(w, ref)
		})}
	srv.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return sock
}

// grpcAnswer writes msg as the one message of a successful call.
func grpcAnswer(w http.ResponseWriter, msg []byte) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	_, _ = w.Write(append(frame, msg...))
	w.Header().Set("Grpc-Status", "0")
}

// imageStatusAnswer is an ImageStatusResponse for an image with id and
// the verbose info JSON; found false leaves the image out (the CRI's
// answer for an image the node lacks).
func imageStatusAnswer(found bool, id, info string) []byte {
	var b []byte
	if found {
		var img []byte
		img = protowire.AppendTag(img, 1, protowire.BytesType)
		img = protowire.AppendString(img, id)
		img = protowire.AppendTag(img, 4, protowire.VarintType) // size, skipped
		img = protowire.AppendVarint(img, 1234)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, img)
	}
	for _, kv := range [][2]string{{"other", "{}"}, {"info", info}} {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[0])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[1])
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
}

// TestCRIImageConfigAnswers: what ohd makes of a CRI's answers, on a
// stand-in socket: the image's entrypoint and command from the verbose
// info; an image it lacks is ErrNotFound; a gRPC error, a socket that is
// not there and a server that is not a CRI are errors naming the socket,
// each within the call's deadline.
func TestCRIImageConfigAnswers(t *testing.T) {
	info := `{"chainID":"sha256:c","imageSpec":{"architecture":"amd64","config":{"Entrypoint":["/bin/tini","--"],"Cmd":["serve","--port","8000"],"User":"1000"}}}`
	sock := fakeCRI(t, func(w http.ResponseWriter, ref string) {
		switch ref {
		case "present:1":
			grpcAnswer(w, imageStatusAnswer(true, "sha256:abc", info))
		case "absent:1":
			grpcAnswer(w, imageStatusAnswer(false, "", ""))
		case "noinfo:1":
			grpcAnswer(w, imageStatusAnswer(true, "sha256:abc", ""))
		default:
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "14")
			w.Header().Set("Grpc-Message", "connection%20error: "+ref)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := CRIImageConfig(sock)
	img, err := cfg(ctx, "present:1")
	if err != nil || img.ID != "sha256:abc" || !slices.Equal(img.Entrypoint, []string{"/bin/tini", "--"}) || !slices.Equal(img.Cmd, []string{"serve", "--port", "8000"}) {
		t.Errorf("present: %+v %v", img, err)
	}
	if _, err := cfg(ctx, "absent:1"); !errors.Is(err, runtime.ErrNotFound) || !strings.Contains(err.Error(), "absent:1") {
		t.Errorf("absent: %v, want ErrNotFound naming the image", err)
	}
	if _, err := cfg(ctx, "noinfo:1"); err == nil || !strings.Contains(err.Error(), "no verbose image information") {
		t.Errorf("no info: %v", err)
	}
	if _, err := cfg(ctx, "broken:1"); err == nil || !strings.Contains(err.Error(), "gRPC status 14: connection error: broken:1") || !strings.Contains(err.Error(), sock) {
		t.Errorf("a gRPC error: %v", err)
	}
	if _, err := cfg(ctx, ""); !errors.Is(err, runtime.ErrInvalidSpec) {
		t.Errorf("an empty reference: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	if _, err := CRIImageConfig(missing)(ctx, "present:1"); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("no socket: %v, want an error naming it", err)
	}
	// An HTTP/2 server that is not a CRI (no gRPC status).
	other := filepath.Join(t.TempDir(), "other.sock")
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Protocols: new(http.Protocols), ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })}
	srv.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { srv.Close(); <-done }()
	if _, err := CRIImageConfig(other)(ctx, "present:1"); err == nil || !strings.Contains(err.Error(), "no gRPC status") {
		t.Errorf("not a CRI: %v", err)
	}
}
