# ohd — see README.md. `make help` lists the targets.

GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/ohd-dev/ohd/pkg/version.Version=$(VERSION)
# ohctl is always static: it is mounted into minimal containers.
STATIC    := CGO_ENABLED=0
PREFIX    ?= /usr/local
FUZZTIME  ?= 10s

.PHONY: help build run test test-kube test-unit test-integration fault-long fmt-check vet test-image bench fuzz fuzz-long install uninstall clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/ohd and a static bin/ohctl
	$(STATIC) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ohd ./cmd/ohd
	$(STATIC) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ohctl ./cmd/ohctl

run: build ## build, then run the daemon with its defaults
	$(BIN)/ohd serve

# TESTSUMMARY shows a line per package as it finishes, failed tests'
# output, and ends with the skipped tests and their reasons.
TESTSUMMARY = $(GO) run ./internal/testsummary

# The integration package takes about 20 minutes on two quiet cores; its
# timeout leaves room for a loaded machine (46 minutes were measured while
# the Kubernetes tests ran beside it).
test: fmt-check vet ## gofmt check, go vet, and every test with -race (Docker tests included); ends with what was skipped and why
	$(GO) test -race -timeout 70m -json ./... | $(TESTSUMMARY)

# The Kubernetes tests: scripts/kube/up brings up a one-node cluster
# (pinned build, cached in ~/.cache/ohd-kube), the tests run against it
# with OHD_KUBE=1 (none skips; -count=1: a cached pass says nothing of
# this cluster), scripts/kube/down tears it down whatever
# they did. The crash and load tests run shorter here than in make test
# (each crash point once, 10 random kills, 20 live conversations, 10
# fault-injection iterations): what
# is the runtime's (each step a kill can land after, adoption, removal)
# is the same at every count, the daemon's recovery is shared with the
# Docker rows, which run the full counts, and the one node has two cores.
KUBERUN ?= /var/lib/ohd-kube
KUBECOUNTS ?= OHD_CRASH_RUNS=1 OHD_CRASH_KILLS=10 OHD_LOAD_CONVERSATIONS=20 OHD_FAULT_ITERATIONS=10
test-kube: ## bring up a one-node Kubernetes cluster, run the Kubernetes tests (both backends where they differ) against it, tear it down
	./scripts/kube/up
	. $(KUBERUN)/env && OHD_KUBE=1 $(KUBECOUNTS) $(GO) test -race -count=1 -timeout 60m -json -run 'Kube|Backend/kubernetes' ./pkg/runtime/kubernetes/ ./packaging/ ./integration/ | $(TESTSUMMARY); \
	rc=$$?; ./scripts/kube/down; exit $$rc

test-unit: ## only the fast package tests (no integration/)
	$(GO) test -race -json $$($(GO) list ./... | grep -v /integration) | $(TESTSUMMARY)

test-integration: ## only the end-to-end tests in integration/
	$(GO) test -race -timeout 45m -json ./integration/... | $(TESTSUMMARY)

# TestBackendFaultInjection runs 50 iterations in make test; this runs
# OHD_FAULT_ITERATIONS of them (500 by default, about ten times as long).
OHD_FAULT_ITERATIONS ?= 500
fault-long: ## the fault-injection test (failpoints, SIGKILL, SIGTERM, a wedged container) with OHD_FAULT_ITERATIONS=500 iterations
	OHD_FAULT_ITERATIONS=$(OHD_FAULT_ITERATIONS) $(GO) test -race -count=1 -timeout 4h -json -run 'TestBackendFaultInjection/docker$$' ./integration/ | $(TESTSUMMARY)

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet: ## go vet (also with the failpoint build tag)
	$(GO) vet ./...
	$(GO) vet -tags ohd_failpoints ./...

test-image: ## build the test image ohd-test-agent:dev from local files (no registry)
	./scripts/build-test-image.sh

bench: ## benchmarks with their same-run baselines, as one table
	$(GO) run ./internal/bench/cmd/ohd-bench

fuzz: ## run every fuzz target briefly (FUZZTIME=10s each)
	./scripts/fuzz.sh $(FUZZTIME)

fuzz-long: ## run every fuzz target for 10 minutes
	./scripts/fuzz.sh 10m

SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
SYSCTLDIR ?= $(PREFIX)/lib/sysctl.d

install: build ## install binaries and service files (PREFIX=/usr/local; starts nothing)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/ohd $(BIN)/ohctl $(DESTDIR)$(PREFIX)/bin/
ifeq ($(shell uname -s),Linux)
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	sed 's|/usr/local/bin/ohd|$(PREFIX)/bin/ohd|' packaging/systemd/ohd.service > $(DESTDIR)$(SYSTEMDUNITDIR)/ohd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/ohd.service
	install -m 0644 packaging/systemd/ohd.socket packaging/systemd/ohd-api.socket $(DESTDIR)$(SYSTEMDUNITDIR)/
	install -d $(DESTDIR)$(SYSUSERSDIR)
	install -m 0644 packaging/systemd/ohd-agent.sysusers $(DESTDIR)$(SYSUSERSDIR)/ohd-agent.conf
	-[ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null && systemd-sysusers $(SYSUSERSDIR)/ohd-agent.conf
	install -d $(DESTDIR)$(SYSCTLDIR)
	install -m 0644 packaging/systemd/ohd.sysctl $(DESTDIR)$(SYSCTLDIR)/60-ohd.conf
	-[ -z "$(DESTDIR)" ] && command -v systemd-sysctl >/dev/null && systemd-sysctl $(SYSCTLDIR)/60-ohd.conf
	@echo "next: sudo systemctl daemon-reload && sudo systemctl enable --now ohd (see packaging/README.md)"
endif
ifeq ($(shell uname -s),Darwin)
	install -d $(DESTDIR)/Library/LaunchDaemons
	sed 's|/usr/local/bin/ohd|$(PREFIX)/bin/ohd|' packaging/launchd/dev.ohd.ohd.plist > $(DESTDIR)/Library/LaunchDaemons/dev.ohd.ohd.plist
	@echo "next: see packaging/launchd/README.md (a Linux ohctl, file sharing), then sudo launchctl bootstrap system /Library/LaunchDaemons/dev.ohd.ohd.plist"
endif

uninstall: ## remove installed binaries and unit files (state is kept: see README)
	rm -f $(DESTDIR)$(PREFIX)/bin/ohd $(DESTDIR)$(PREFIX)/bin/ohctl
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/ohd.service $(DESTDIR)$(SYSTEMDUNITDIR)/ohd.socket $(DESTDIR)$(SYSTEMDUNITDIR)/ohd-api.socket
	rm -f $(DESTDIR)$(SYSUSERSDIR)/ohd-agent.conf $(DESTDIR)$(SYSCTLDIR)/60-ohd.conf

clean: ## remove build output
	rm -rf $(BIN)
