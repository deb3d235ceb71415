package runtime

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/jsonstream"
)

// Pull is an image pull in progress, as the engine reports it in its pull
// stream (the JSON messages of POST /images/create). Docker.Pulls lists
// them, so a caller waiting for a create can show how far the pull is.
//
// Every string is the engine's, scrubbed of credentials (scrubCredentials):
// ohd sends the engine no registry credentials, but an engine configured
// with a mirror URL holding a user and password can name it in a status or
// error.
type Pull struct {
	// Image is the reference being pulled.
	Image string
	// Started is when the first caller asked for it.
	Started time.Time
	// Status is the engine's last status of the image as a whole
	// ("Pulling from openhands/agent-server", "Digest: sha256:...").
	Status string
	// Layers are the image's layers in the order the engine announced them.
	Layers []PullLayer
}

// PullLayer is one layer of a Pull.
type PullLayer struct {
	// ID is the engine's short layer ID.
	ID string
	// Status is the layer's last status ("Waiting", "Downloading",
	// "Extracting", "Pull complete", "Already exists", ...).
	Status string
	// Downloaded and Size are the bytes of the layer's download so far and
	// in all (compressed); Size is 0 until the engine has said it.
	Downloaded, Size int64
	// Done says the layer is in the engine ("Pull complete", "Already
	// exists").
	Done bool
}

// Lengths at which pull strings are cut: a status is a short phrase.
const (
	maxPullStatus  = 200
	maxPullLayerID = 72
)

// pulls tracks the pulls in progress, one record per reference: two
// creates that pull the same image at once (the engine joins them into
// one download) share it.
type pulls struct {
	mu sync.Mutex
	m  map[string]*pullState
}

type pullState struct {
	users int
	p     Pull
	index map[string]int // layer ID -> index in p.Layers
}

// begin registers a caller pulling ref; end must follow.
func (ps *pulls) begin(ref string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[string]*pullState{}
	}
	st := ps.m[ref]
	if st == nil {
		st = &pullState{p: Pull{Image: ref, Started: time.Now()}, index: map[string]int{}}
		ps.m[ref] = st
	}
	st.users++
}

func (ps *pulls) end(ref string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if st := ps.m[ref]; st != nil {
		if st.users--; st.users <= 0 {
			delete(ps.m, ref)
		}
	}
}

// update records one message of ref's pull stream and returns the layer
// it was about (zero for the image as a whole).
func (ps *pulls) update(ref string, msg jsonstream.Message) PullLayer {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[ref]
	if st == nil {
		return PullLayer{}
	}
	status := cut(scrubCredentials(msg.Status), maxPullStatus)
	// "Pulling from <repository>" carries the tag as its id, not a layer.
	if msg.ID == "" || strings.HasPrefix(msg.Status, "Pulling from ") {
		st.p.Status = status
		return PullLayer{}
	}
	id := cut(scrubCredentials(msg.ID), maxPullLayerID)
	i, ok := st.index[id]
	if !ok {
		i = len(st.p.Layers)
		st.index[id] = i
		st.p.Layers = append(st.p.Layers, PullLayer{ID: id})
	}
	l := &st.p.Layers[i]
	l.Status = status
	switch msg.Status {
	case "Downloading":
		if p := msg.Progress; p != nil && p.Total > 0 {
			l.Downloaded, l.Size = p.Current, p.Total
		}
	case "Verifying Checksum", "Download complete", "Extracting", "Pull complete":
		// The download is over once the engine verifies or extracts it.
		l.Downloaded = l.Size
	}
	if msg.Status == "Pull complete" || msg.Status == "Already exists" {
		l.Done = true
	}
	return *l
}

// list returns a copy of every pull in progress, oldest first.
func (ps *pulls) list() []Pull {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]Pull, 0, len(ps.m))
	for _, st := range ps.m {
		p := st.p
		p.Layers = slices.Clone(p.Layers)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pull) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.Image, b.Image)
	})
	return out
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

var (
	// scheme://user:password@host: the user information of a URL.
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@"'<>]+@`)
	// ?query of a URL: a token endpoint's, or a signed blob URL's.
	urlQuery = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>?#]*)\?[^\s"'<>#]*`)
	// Authorization header values.
	authValue = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
)

// scrubCredentials removes what could be a credential from a string the
// engine wrote about a pull: the user information and query of URLs, and
// bearer or basic authorization values.
func scrubCredentials(s string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}[redacted]@")
	s = urlQuery.ReplaceAllString(s, "${1}?[redacted]")
	return authValue.ReplaceAllString(s, "${1} [redacted]")
}
