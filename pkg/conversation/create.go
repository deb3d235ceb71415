package conversation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// Create: the plan (everything checked, the record written before any side
// effect), then the steps (provision), and the undo of a failed one (fail).

// Target is where a running conversation's inner server answers.
type Target struct {
	// Addr is "127.0.0.1:<port>"; for a container without network
	// (egress broker) a name of its namespace that is never resolved
	// ("ns<serial>.ohd-netns.invalid:<inner port>", see netnsTargetAddr),
	// reached only through Dial; "" for the local runtime.
	Addr string
	// InnerKey is the inner session key the proxy sends.
	InnerKey []byte
	// Dial, when not nil, connects to the inner server from inside its
	// container's network namespace; the proxy uses it instead of dialing
	// Addr (which stays the name of this target: connections are pooled
	// by it, and error bodies are scrubbed of it).
	Dial func(ctx context.Context) (net.Conn, error)
	// DialAddr is the inner server's address as Dial reaches it (inside
	// the container); it is scrubbed from answers too.
	DialAddr string
	// DialPort, when not nil, connects to another port on the container's
	// loopback from inside its namespace (VS Code, the desktop); nil when
	// the namespace cannot be entered (those ports are never published).
	DialPort func(ctx context.Context, port int) (net.Conn, error)
}

// Create provisions a conversation; see the package comment.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (store.Conversation, error) {
	if err := req.Validate(); err != nil {
		return store.Conversation{}, err
	}
	made, err := m.makeWorkspace(req)
	if err != nil {
		return store.Conversation{}, err
	}
	c, err := m.create(ctx, req)
	if err != nil {
		made.Undo()
	}
	return c, err
}

func (m *Manager) create(ctx context.Context, req CreateRequest) (store.Conversation, error) {
	repo, err := m.wt.Inspect(ctx, req.Workspace)
	if err != nil {
		return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := m.checkProtected(repo); err != nil {
		return store.Conversation{}, err
	}
	// The image is looked up in the engine while the request is checked
	// (an engine round trip off the way of every create); a pull, a side
	// effect, waits until the request is known good (below).
	type inspected struct {
		img runtime.Image
		err error
	}
	var early chan inspected
	if ii, ok := m.rt.(runtime.ImageInspector); ok && m.rt.Kind() != "local" {
		early = make(chan inspected, 1)
		go func() {
			img, err := ii.InspectImage(ctx, m.cfg.Image)
			early <- inspected{img, err}
		}()
	}
	id := req.ID
	replaceFailed := false
	if id == "" {
		id = store.NewID()
	} else if old, err := m.st.Conversation(id); err == nil {
		// A client retrying a failed create with the same id gets a new
		// attempt once the failed record owns nothing any more; so does
		// one re-creating a deleted conversation's id, as on the agent
		// server, where a deleted conversation is gone (ref §9).
		if old.State != store.StateFailed && old.State != store.StateDeleted {
			return store.Conversation{}, fmt.Errorf("%w: conversation %s already exists (%s)", ErrConflict, id, old.State)
		}
		if old.UndoPending {
			if err := m.retryUndo(ctx, old); err != nil {
				return store.Conversation{}, fmt.Errorf("%w: conversation %s failed and undoing it is not finished (%v): retry later", ErrConflict, id, err)
			}
		}
		replaceFailed = true
	}
	if req.ID != "" && (req.Worktree || m.views()) {
		if err := m.keptWorkFree(ctx, repo, id); err != nil {
			return store.Conversation{}, err
		}
	}
	var plan worktree.Worktree
	switch {
	case repo.IsGit && req.Worktree:
		plan, err = m.wt.Plan(ctx, worktree.AddOptions{Repo: repo, Inspected: true, ConversationID: id, StartPoint: req.StartPoint, View: m.views()})
	case repo.IsGit && m.views():
		plan, err = m.wt.PlanInPlace(ctx, repo, id)
	}
	if err != nil {
		if errors.Is(err, worktree.ErrGit) {
			return store.Conversation{}, &StepError{ID: id, Step: "worktree", Err: err}
		}
		return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if plan.InPlace {
		// The whole work tree is mounted (read-only above a subdirectory).
		if err := m.checkProtected(worktree.Repo{Workspace: plan.Repo}); err != nil {
			return store.Conversation{}, err
		}
	}
	var img runtime.Image
	if m.rt.Kind() != "local" {
		var in inspected
		if early != nil {
			in = <-early
		}
		if early == nil || in.err != nil {
			// Not there (or not asked): resolved as ever, pull included.
			if in.img, in.err = m.rt.ResolveImage(ctx, m.cfg.Image); in.err != nil {
				return store.Conversation{}, &StepError{ID: id, Step: "image", Err: in.err}
			}
		}
		img = in.img
		m.images.Store(img.ID, img)
	}
	uid, gid := repo.UID, repo.GID
	if !repo.IsGit {
		if uid, gid, err = ownerOf(repo.Workspace); err != nil {
			return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if m.rt.Kind() != "local" {
			// The repositories in a plain folder must be protectable
			// (too many to mount, a .git that is a symlink: refused now,
			// before anything is made).
			if _, err := m.wt.PlainFolderMounts(repo.Workspace, uid, gid); err != nil {
				return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
	}
	// The agent's own uid must be able to share the trees it writes, and
	// the host's git must refuse what it plants (package gitboundary).
	tree := repo.Workspace
	switch {
	case plan.InPlace:
		tree = plan.Repo
	case plan.Path != "":
		tree = m.wt.Root()
	}
	if err := m.checkBoundary(ctx, uid, gid, tree); err != nil {
		return store.Conversation{}, err
	}
	conv := store.Conversation{
		ID: id, State: store.StateProvisioning, Runtime: m.rt.Kind(), Egress: m.egressMode(),
		Workspace: repo.Workspace, WorkingDir: repo.Workspace,
		UID: uid, GID: gid, Grants: req.Grants, BrokerEpoch: 1,
		Image: img.Ref, ImageID: img.ID, Request: req.Request, LaunchedAgentProfile: req.LaunchedAgentProfile,
	}
	if m.rt.Kind() != "local" && !failpoint.On("legacy/shared-git-layout") {
		// (A conversation made in the legacy layout is made as an
		// earlier release made it: its container runs as the owner until
		// it is next created.)
		conv.AgentUID, conv.AgentGID = m.cfg.AgentUID, m.cfg.AgentGID
	}
	if req.Worktree && !repo.IsGit {
		conv.Notes = append(conv.Notes, "the workspace is not a git repository: started without a worktree, the workspace is mounted at its own path")
	}
	if plan.InPlace {
		recordInPlace(&conv, plan)
	} else if plan.Path != "" {
		// Recorded before the worktree exists: a crash right after git
		// worktree add still leaves reconcile enough to remove it.
		conv.Repo, conv.CommonDir, conv.Worktree, conv.Branch = plan.Repo, plan.CommonDir, plan.Path, plan.Branch
		conv.StartPoint, conv.StartCommit = plan.StartPoint, plan.StartCommit
		conv.WorkingDir = filepath.Join(plan.Path, repo.Prefix)
		conv.GitLayout, conv.GitView, conv.Published = store.GitLayoutShared, plan.View, plan.StartCommit
		if plan.View != "" {
			conv.GitLayout = store.GitLayoutView
		}
	}
	if pr, ok := m.rt.(runtime.PolicyReporter); ok && conv.Egress == store.EgressBroker {
		// Said before anything runs, in the answer: isolation that ohd
		// cannot verify is not claimed.
		if enforced, why := pr.PolicyEnforcement(ctx); !enforced {
			conv.Notes = append(conv.Notes, "egress: "+why)
		}
	}
	if img.Floating {
		conv.Notes = append(conv.Notes, fmt.Sprintf("image %s is a floating reference; it was pinned to %s for this conversation", img.Ref, img.ID))
		m.log.Warn("floating image reference: pin a version tag or digest", "image", img.Ref, "id", img.ID)
	}
	unlock := m.lock(id)
	defer unlock()
	unlockFolder := func() {}
	if plan.InPlace {
		// Conversations on one folder share it (sharersOf); their
		// creates are recorded one at a time under the folder's lock, so
		// each sees the others. It is held until the record is written,
		// not through the create, so creates on different folders (and
		// the rest of a create on one) never wait for each other.
		unlockFolder = m.lockIn(m.inPlaceLocks, plan.Repo)
		if others := m.sharersOf(plan.Repo, id); len(others) > 0 {
			conv.Notes = append(conv.Notes, fmt.Sprintf("the folder %s is shared with %d other conversation(s) working there in place (the oldest: %s): the files are one set, each has its own git view and branch", plan.Repo, len(others), others[0].ID))
		}
	}
	if replaceFailed {
		if err := m.st.DeleteConversation(id); err != nil {
			unlockFolder()
			return store.Conversation{}, fmt.Errorf("create conversation %s: replace the failed record: %w", id, err)
		}
	}
	err = m.st.CreateConversationWithKey(conv, newInnerKey())
	unlockFolder()
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			return store.Conversation{}, fmt.Errorf("%w: conversation %s already exists", ErrConflict, id)
		}
		return store.Conversation{}, fmt.Errorf("create conversation %s: %w", id, err)
	}
	failpoint.Hit("create/after-record")
	// A step that panics (a bug) still has its create undone and its
	// record finished, before the panic goes on to the caller.
	defer func() {
		if r := recover(); r != nil {
			m.log.Error("conversation create panicked; undoing", "id", id, "panic", r)
			m.cfg.Metrics.CreateResult(false, "internal")
			_, _ = m.fail(conv, &StepError{ID: id, Step: "internal", Err: fmt.Errorf("ohd failed internally: %v", r)})
			panic(r)
		}
	}()
	if req.Prepare != nil {
		g, err := req.Prepare(ctx, id)
		if err != nil {
			m.cfg.Metrics.CreateResult(false, "mediate")
			return m.fail(conv, &StepError{ID: id, Step: "mediate", Err: err})
		}
		conv.Grants = conv.Grants.Merge(g)
	}
	if req.ForkOf != "" {
		parent, err := m.st.Conversation(req.ForkOf)
		var g store.Grants
		if err == nil {
			g, err = m.st.CopyScoped(parent.ID, id, parent.Grants)
		}
		if err != nil {
			m.cfg.Metrics.CreateResult(false, "mediate")
			return m.fail(conv, &StepError{ID: id, Step: "mediate", Err: fmt.Errorf("take the credentials of %s: %w", req.ForkOf, err)})
		}
		conv.Grants = conv.Grants.Merge(g)
	}
	conv, err = m.provision(ctx, conv, repo, req)
	if err != nil {
		m.cfg.Metrics.CreateResult(false, failedStep(err))
		return m.fail(conv, err)
	}
	m.cfg.Metrics.CreateResult(true, "")
	return conv, nil
}

// failedStep names the step of a failed create for metrics: the
// container's own step (create, start, ready) when the runtime says.
func failedStep(err error) string {
	var se *StepError
	if !errors.As(err, &se) {
		return ""
	}
	var start *runtime.StartError
	if se.Step == "container" && errors.As(se.Err, &start) {
		return "container_" + start.Step
	}
	return se.Step
}

// startFailedStep is the runtime's failed step of a container start.
func startFailedStep(err error) string {
	var start *runtime.StartError
	if errors.As(err, &start) {
		return start.Step
	}
	return ""
}

func (m *Manager) provision(ctx context.Context, conv store.Conversation, repo worktree.Repo, req CreateRequest) (store.Conversation, error) {
	id := conv.ID
	var err error
	t0 := time.Now()
	step := time.Now()
	done := func(name string) {
		m.cfg.OnStep(id, name, time.Since(step))
		step = time.Now()
	}
	// The broker (its socket, its directory, the inner server's keys and
	// state) needs nothing of the worktree: it is made while git makes the
	// worktree. Every return below waits for it first, so that a failed
	// create's undo finds the broker opened or not, never half.
	type opened struct {
		key []byte
		err error
	}
	bc := make(chan opened, 1)
	bconv := conv // the worktree's fields are filled in below meanwhile
	go func() {
		defer func() {
			if r := recover(); r != nil { // a bug: the create fails and is undone
				bc <- opened{err: fmt.Errorf("ohd failed internally: %v", r)}
			}
		}()
		key, err := m.openBroker(ctx, bconv)
		bc <- opened{key, err}
	}()
	brokerWaited := false
	var broker opened
	waitBroker := func() opened {
		if !brokerWaited {
			broker, brokerWaited = <-bc, true
		}
		return broker
	}
	defer waitBroker()
	if repo.IsGit && req.Worktree {
		planned := worktreeOf(conv)
		wt, werr := m.wt.Add(ctx, worktree.AddOptions{Repo: repo, ConversationID: id, StartPoint: req.StartPoint, Planned: &planned, View: m.views(), Share: m.shareConvDir(conv)})
		if werr != nil {
			waitBroker()
			return conv, &StepError{ID: id, Step: "worktree", Err: werr}
		}
		// The steps' results are kept in memory and written once, with the
		// state running: a crash before that leaves a provisioning record,
		// and reconcile finds what was made by the record's planned
		// worktree path (worktree.Find), the socket directory's name and
		// the containers' labels.
		conv.Repo, conv.CommonDir, conv.Worktree, conv.AdminID = wt.Repo, wt.CommonDir, wt.Path, wt.AdminID
		conv.Branch, conv.StartPoint, conv.StartCommit = wt.Branch, wt.StartPoint, wt.StartCommit
		conv.WorkingDir = filepath.Join(wt.Path, repo.Prefix)
		conv.GitView, conv.Published = wt.View, wt.StartCommit
		done("worktree")
		failpoint.Hit("create/after-worktree")
	} else if conv.InPlace {
		if _, err := m.wt.AddInPlace(ctx, worktreeOf(conv)); err != nil {
			waitBroker()
			return conv, &StepError{ID: id, Step: "worktree", Err: err}
		}
		done("worktree")
		failpoint.Hit("create/after-worktree")
	}
	// A worktree's container mounts are planned while its trees are
	// shared: the plan reads the worktree's index and pointers (for a
	// large repository, a git run that lists every file), which the
	// sharing does not change. Every return below waits for it. (In place
	// and a plain folder, the plan follows the sharing, as before.)
	type planned struct {
		mounts []runtime.Mount
		err    error
	}
	var pc chan planned
	if m.rt.Kind() != "local" && conv.Worktree != "" && !conv.InPlace {
		pc = make(chan planned, 1)
		pconv := conv
		go func() {
			defer func() {
				if r := recover(); r != nil { // a bug: the create fails and is undone
					pc <- planned{err: fmt.Errorf("ohd failed internally: %v", r)}
				}
			}()
			ms, err := m.workspaceMounts(pconv)
			pc <- planned{ms, err}
		}()
	}
	planWaited := false
	var plan planned
	waitPlan := func() planned {
		if pc != nil && !planWaited {
			plan, planWaited = <-pc, true
		}
		return plan
	}
	planNow := func() planned {
		if pc != nil {
			return waitPlan()
		}
		ms, err := m.workspaceMounts(conv)
		return planned{ms, err}
	}
	defer waitPlan()
	if separated(conv) {
		if err := m.shareTrees(conv, false); err != nil {
			waitPlan()
			waitBroker()
			return conv, &StepError{ID: id, Step: "worktree", Err: err}
		}
		done("share")
	}
	b := waitBroker()
	innerKey, err := b.key, b.err
	if err != nil {
		return conv, &StepError{ID: id, Step: "broker", Err: err}
	}
	conv.BrokerDir = m.brokerDir(id)
	done("broker")
	failpoint.Hit("create/after-broker")
	if req.ForkOf != "" && m.rt.Kind() != "local" {
		if err := m.seedFork(conv, req.ForkOf); err != nil {
			return conv, &StepError{ID: id, Step: "fork", Err: err}
		}
		done("fork")
	}
	var target Target
	keep := func() {} // keeps the create's namespace dialer once the create is recorded
	if m.rt.Kind() != "local" {
		p := planNow()
		if p.err != nil {
			return conv, &StepError{ID: id, Step: "container", Err: contractHint(p.err, conv.Image)}
		}
		spec, err := m.specWith(ctx, conv, p.mounts)
		if err != nil {
			return conv, &StepError{ID: id, Step: "container", Err: contractHint(err, conv.Image)}
		}
		inst, err := m.rt.Start(ctx, spec)
		if err != nil {
			m.cfg.Metrics.ContainerStart(false, startFailedStep(err))
			return conv, &StepError{ID: id, Step: "container", Err: contractHint(err, conv.Image)}
		}
		m.cfg.Metrics.ContainerStart(true, "")
		m.cfg.OnStep(id, "container_create", inst.Timings.Create)
		m.cfg.OnStep(id, "container_start", inst.Timings.Start)
		m.cfg.OnStep(id, "container_ready", inst.Timings.Ready)
		step = time.Now()
		failpoint.Hit("create/after-start")
		conv.ContainerID, conv.ContainerName, conv.HostPort = inst.ContainerID, inst.Name, inst.HostPort
		target = Target{Addr: inst.Addr, InnerKey: innerKey}
		if inst.NoNetwork {
			nd, err := m.openNetns(ctx, inst.ContainerID)
			if err != nil {
				return conv, &StepError{ID: id, Step: "forward", Err: err}
			}
			target.Dial, target.DialAddr, target.DialPort = nd.DialContext, nd.Addr, nd.DialPort
			target.Addr = netnsTargetAddr(nd, inst.ContainerID, inst.HostPort)
			kept := false
			defer func() {
				if !kept {
					nd.Close()
				}
			}()
			keep = func() { kept = true; m.keepNetns(id, inst.ContainerID, inst.HostPort, nd) }
		}
	}
	if req.Forward != nil {
		if err := req.Forward(ctx, conv, target); err != nil {
			return conv, &StepError{ID: id, Step: "forward", Err: err}
		}
		done("forward")
		failpoint.Hit("create/after-forward")
	}
	made := conv
	conv, err = m.st.UpdateConversation(id, func(c *store.Conversation) error {
		created := c.CreatedAt
		*c = made
		c.CreatedAt, c.State, c.LastActiveAt = created, store.StateRunning, time.Now().UTC()
		return nil
	})
	if err != nil {
		return made, &StepError{ID: id, Step: "record", Err: err}
	}
	keep()
	m.cfg.OnStep(id, "create_total", time.Since(t0))
	m.log.Info("conversation created", "id", id, "runtime", conv.Runtime, "worktree", conv.Worktree, "container", shortID(conv.ContainerID))
	return conv, nil
}

// fail undoes whatever a failed create provisioned and records the failure.
func (m *Manager) fail(conv store.Conversation, cause error) (store.Conversation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	step := "record"
	var se *StepError
	if errors.As(cause, &se) {
		step = se.Step
	}
	m.log.Warn("conversation create failed; undoing", "id", conv.ID, "step", step, "err", cause)
	// conv is the in-memory record of the create (what each completed step
	// made), or the stored one when reconcile undoes a crashed create.
	_, uerr := m.teardown(ctx, conv, undoCreate)
	if uerr != nil {
		m.log.Error("undo of a failed create incomplete; ohd retries it", "id", conv.ID, "err", uerr)
		cause = fmt.Errorf("%w; undo incomplete, ohd retries it: %v", cause, uerr)
	}
	if _, err := m.st.UpdateConversation(conv.ID, func(c *store.Conversation) error {
		c.State = store.StateFailed
		c.Error = cause.Error()
		c.FailedStep = step
		c.UndoPending = uerr != nil
		if uerr == nil {
			c.ContainerID, c.HostPort = "", 0
		}
		return nil
	}); err != nil {
		// The record stays provisioning; RunUndoRetries finishes it once
		// the store takes writes again, without a restart.
		m.log.Error("recording a failed create failed; ohd retries it", "id", conv.ID, "err", err)
	}
	return store.Conversation{}, cause
}

// seedFork moves the fork that conversation parent's inner server wrote
// under conv's id into conv's own inner state (openhands.CopyForkState),
// before conv's container starts: its server loads it at start-up. The
// fork's files then name conv's relay credentials (copied by
// store.CopyScoped), inner state and working directory, their tokens
// sealed with conv's inner cipher.
func (m *Manager) seedFork(conv store.Conversation, parentID string) error {
	parent, err := m.st.Conversation(parentID)
	if err != nil {
		return err
	}
	oldKey, err := m.st.InnerSecretKey(parent.ID, newInnerKey)
	if err != nil {
		return err
	}
	newKey, err := m.st.InnerSecretKey(conv.ID, newInnerKey)
	if err != nil {
		return err
	}
	src, dst := openhands.DirsOf(m.cfg.InnerRoot, parent.ID), openhands.DirsOf(m.cfg.InnerRoot, conv.ID)
	mv := openhands.ForkMove{
		From: parent.ID, To: conv.ID,
		Old: openhands.NewFernet(string(oldKey)), New: openhands.NewFernet(string(newKey)),
		Relay: "http://" + broker.RelayAddr,
		Paths: [][2]string{{src.Root, dst.Root}, {parent.WorkingDir, conv.WorkingDir}},
	}
	clear(oldKey)
	clear(newKey)
	hex := filepath.Base(src.StateDir(conv.ID))
	uid, gid := agentOf(conv)
	err = openhands.CopyForkState(m.cfg.InnerRoot, []string{parent.ID, filepath.Base(src.Conversations), hex}, dst.StateDir(conv.ID), uid, gid, mv)
	if errors.Is(err, openhands.ErrNoState) {
		return fmt.Errorf("conversation %s's agent server wrote no fork %s", parent.ID, conv.ID)
	}
	return err
}
