package conversation

import (
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// stallWindow is how far back ohctl doctor reports engine stalls.
const stallWindow = time.Hour

// stalls returns the engine calls the runtime gave up on, if it records
// them (runtime.StallReporter).
func (m *Manager) stalls() []runtime.Stall {
	if r, ok := m.rt.(runtime.StallReporter); ok {
		return r.Stalls()
	}
	return nil
}

// StallsOf describes the engine calls on c's container(s) that ohd gave
// up on, oldest first (ohctl show).
func (m *Manager) StallsOf(c store.Conversation) []string {
	var out []string
	for _, s := range m.stalls() {
		if stallOf(s, c) {
			out = append(out, s.String())
		}
	}
	return out
}

func stallOf(s runtime.Stall, c store.Conversation) bool {
	switch {
	case s.Container == "":
		return false
	case c.ContainerID != "" && strings.HasPrefix(c.ContainerID, s.Container):
		return true
	case c.ContainerName != "" && s.Container == c.ContainerName:
		return true
	}
	return s.Container == runtime.ContainerName(c.ID)
}

// checkEngine is ohctl doctor's engine check: the calls ohd gave up on in
// the last hour (of conv's container only, if conv is set), each a
// warning that names the call, the container and the time.
func (m *Manager) checkEngine(conv *store.Conversation) []control.DoctorCheck {
	if m.rt.Kind() == "local" {
		return nil
	}
	var out []control.DoctorCheck
	for _, s := range m.stalls() {
		if time.Since(s.At) > stallWindow || (conv != nil && !stallOf(s, *conv)) {
			continue
		}
		fix := "if the engine stays stuck on that container, restart the Docker engine (containers with a live conversation are adopted again)"
		if s.Kind == "pod" {
			fix = "if the node stays stuck on that pod, restart its container runtime (containerd) and then the kubelet (pods with a live conversation are adopted again)"
		}
		ck := control.DoctorCheck{Check: "engine", Status: "warn",
			Detail: s.String() + ": ohd gave up on the call and retries what needed it; " + fix}
		if conv != nil {
			ck.Conversation = conv.ID
		}
		out = append(out, ck)
	}
	if len(out) == 0 && conv == nil {
		out = append(out, control.DoctorCheck{Check: "engine", Status: "ok", Detail: "every engine call of the last hour answered within its deadline"})
	}
	return out
}
