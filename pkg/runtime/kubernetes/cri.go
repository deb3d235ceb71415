package kubernetes

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// DefaultCRISocket is where containerd serves the CRI on a node.
const DefaultCRISocket = "/run/containerd/containerd.sock"

// maxCRIMessage bounds an ImageStatus answer: an image's configuration
// (its history, labels and environment included) is a few kilobytes.
const maxCRIMessage = 4 << 20

// CRIImageConfig reads an image's configuration from the node's container
// runtime over the CRI (the kubelet's own API to it) at socket: the
// ImageService's ImageStatus with verbose set, whose "info" entry holds
// the image's OCI configuration as JSON (containerd: {"imageSpec": ...}).
// The image must be the node's: a missing one is runtime.ErrNotFound.
//
// The CRI is gRPC. ohd makes this one unary call, so it speaks it
// directly (HTTP/2 without TLS on the Unix socket, the gRPC frame, the
// two messages' fields by number from k8s.io/cri-api's api.proto) rather
// than take in a gRPC runtime and the generated API.
func CRIImageConfig(socket string) ImageConfigFunc {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		Protocols: new(http.Protocols),
	}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: tr}
	return func(ctx context.Context, ref string) (runtime.Image, error) {
		if ref == "" {
			return runtime.Image{}, fmt.Errorf("resolve image: %w: empty reference", runtime.ErrInvalidSpec)
		}
		ctx, cancel := call(ctx)
		defer cancel()
		resp, err := criCall(ctx, c, "/runtime.v1.ImageService/ImageStatus", imageStatusRequest(ref))
		if err != nil {
			return runtime.Image{}, fmt.Errorf("resolve image %s: the node's container runtime (CRI at %s): %w", ref, socket, err)
		}
		id, info, found, err := parseImageStatus(resp)
		if err != nil {
			return runtime.Image{}, fmt.Errorf("resolve image %s: the node's container runtime (CRI at %s): %w", ref, socket, err)
		}
		if !found {
			return runtime.Image{}, fmt.Errorf("resolve image %s: %w: the node's container runtime does not have it (ohd runs only the node's images unless --kube-pull-images; import it, e.g. ctr -n k8s.io images import)", ref, runtime.ErrNotFound)
		}
		var v struct {
			ImageSpec struct {
				Config struct {
					Entrypoint, Cmd []string
				} `json:"config"`
			} `json:"imageSpec"`
		}
		if info == "" {
			return runtime.Image{}, fmt.Errorf("resolve image %s: the node's container runtime (CRI at %s) gave no verbose image information (its entrypoint): containerd gives it", ref, socket)
		}
		if err := json.Unmarshal([]byte(info), &v); err != nil {
			return runtime.Image{}, fmt.Errorf("resolve image %s: the image information of the node's container runtime: %w", ref, err)
		}
		return runtime.Image{Ref: ref, ID: id, Entrypoint: v.ImageSpec.Config.Entrypoint, Cmd: v.ImageSpec.Config.Cmd}, nil
	}
}

// imageStatusRequest is runtime.v1.ImageStatusRequest{image: {image:
// ref}, verbose: true}.
func imageStatusRequest(ref string) []byte {
	var spec []byte
	spec = protowire.AppendTag(spec, 1, protowire.BytesType) // ImageSpec.image
	spec = protowire.AppendString(spec, ref)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType) // ImageStatusRequest.image
	b = protowire.AppendBytes(b, spec)
	b = protowire.AppendTag(b, 2, protowire.VarintType) // ImageStatusRequest.verbose
	b = protowire.AppendVarint(b, 1)
	return b
}

// parseImageStatus reads runtime.v1.ImageStatusResponse: image (1; absent
// when the runtime has no such image) and its id (Image.id, 1), and the
// value of "info" in the info map (2).
func parseImageStatus(b []byte) (id, info string, found bool, err error) {
	err = protoFields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			found = true
			return protoFields(v, func(num protowire.Number, v []byte) error {
				if num == 1 {
					id = string(v)
				}
				return nil
			})
		case 2:
			var k, val string
			if err := protoFields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					k = string(v)
				case 2:
					val = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			if k == "info" {
				info = val
			}
		}
		return nil
	})
	return id, info, found, err
}

// protoFields calls fn with each length-delimited field of message b (the
// only kind these messages' wanted fields are), skipping the others.
func protoFields(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed CRI message: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("malformed CRI message: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("malformed CRI message: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// criCall makes the unary gRPC call method with request message req and
// returns the answer's message: one uncompressed length-prefixed frame
// each way, the call's status in the grpc-status trailer (or header, for
// an answer without a message).
func criCall(ctx context.Context, c *http.Client, method string, req []byte) ([]byte, error) {
	body := make([]byte, 5+len(req))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(req)))
	copy(body[5:], req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/grpc")
	hr.Header.Set("TE", "trailers")
	resp, err := c.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP status %s", method, resp.Status)
	}
	msg, rerr := io.ReadAll(io.LimitReader(resp.Body, maxCRIMessage+5+1))
	status := resp.Trailer.Get("Grpc-Status")
	text := resp.Trailer.Get("Grpc-Message")
	if status == "" {
		status, text = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if rerr != nil {
		return nil, fmt.Errorf("%s: %w", method, rerr)
	}
	if status != "0" {
		if status == "" {
			return nil, fmt.Errorf("%s: the answer has no gRPC status (is this a CRI socket?)", method)
		}
		if t, err := url.PathUnescape(text); err == nil {
			text = t
		}
		return nil, fmt.Errorf("%s: gRPC status %s: %s", method, status, text)
	}
	if len(msg) < 5 {
		return nil, fmt.Errorf("%s: an answer of %d bytes, without its message", method, len(msg))
	}
	if msg[0] != 0 {
		return nil, fmt.Errorf("%s: a compressed answer, which was not asked for", method)
	}
	n := binary.BigEndian.Uint32(msg[1:5])
	if n > maxCRIMessage {
		return nil, fmt.Errorf("%s: an answer of %s bytes, more than the %d allowed", method, strconv.FormatUint(uint64(n), 10), maxCRIMessage)
	}
	if uint32(len(msg)-5) != n {
		return nil, errors.New(method + ": the answer's length does not match its frame")
	}
	return msg[5:], nil
}
