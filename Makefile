# Plumb. `make demo` runs the main job on the embedded default; `make test`
# runs every test (what CI runs); `make bench` measures against baselines.
SHELL   := /bin/bash
GO      ?= go
BIN     := bin/plumb
PYTEST  ?= python3 -m pytest
# FUZZTIME=30s fuzzes every target for that long instead of its budget.
FUZZTIME ?=

# Every fuzz target as package:Name:budget. Budgets are execution counts
# (about 10 s each on a 2-core CI machine), not durations: a duration
# races Go 1.26's fuzz coordinator at its deadline and fails with a bare
# "context deadline exceeded" and no crasher (go.dev/issue/75804).
FUZZ_TARGETS := \
	./block:FuzzParse:800000x \
	./codecs:FuzzReaders:200000x \
	./server:FuzzTicket:40000x \
	./server:FuzzPutHeader:50000x \
	./server:FuzzTicketAccess:20000x \
	./server:FuzzOthersGroups:3000x \
	./server:FuzzFlightData:20000x \
	./server:FuzzActions:1500x \
	./ipcguard:FuzzCheckFile:30000x \
	./auth:FuzzVerify:300000x \
	./auth:FuzzAllowed:300000x \
	./pcap:FuzzReader:100000x \
	./agent:FuzzCut:3000x \
	./pipeline:FuzzParseJob:200000x \
	./dns/dnsmsg:FuzzParse:200000x \
	./pcap/netpkt:FuzzDecode:200000x \
	./dns/dnstcp:FuzzReassemble:150000x \
	./pcap/anon:FuzzPacket:200000x \
	./pcap/filter:FuzzCompile:100000x \
	./dns/dnstop:FuzzCheckTally:100000x \
	./dns/newdomains:FuzzLoad:100000x \
	./dns/pdnspb:FuzzFrame:100000x \
	./dns/enrich:FuzzDatabase:30000x \
	./dns/dnstap:FuzzDecode:200000x \
	./state:FuzzBlockRecord:100000x \
	./engine:FuzzStageArrivals:300x

.PHONY: build build-agent test test-go test-state-postgres chaos test-python fuzz-short bench bench-scale bench-windows demo lint clean image kube

# The build says what it is (plumb version, plumb_build_info) even where
# Go does not stamp version control information (-buildvcs=false).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/plumb

# build-agent builds bin/plumb-agent, what a capture site runs: the
# agent, import and dns verbs without the server's packages (docs/agent.md).
build-agent:
	$(GO) build -tags agent -ldflags "-s -w $(LDFLAGS)" -o bin/plumb-agent ./cmd/plumb

# image builds the container image ghcr.io/plumb-dev/plumb:$(VERSION) from
# Containerfile with podman, or docker when there is no podman.
IMAGE ?= ghcr.io/plumb-dev/plumb
image:
	@builder=$$(command -v podman || command -v docker) || { echo "make image: neither podman nor docker is installed" >&2; exit 1; }; \
	$$builder build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(VERSION) -f Containerfile . && \
	echo "built $(IMAGE):$(VERSION); push it, then: make kube > plumb.yaml && kubectl apply -f plumb.yaml"

# kube prints the Kubernetes manifests (deploy/kubernetes, kustomize) with
# the image of this build: $(IMAGE):$(VERSION), as make image tags it.
# KUBE=deploy/kubernetes/base leaves out the optional components.
KUBE ?= deploy/kubernetes
KUSTOMIZE ?= kustomize
kube:
	@tmp=$$(mktemp -d $(dir $(abspath $(KUBE))).kube.XXXXXX); trap 'rm -rf $$tmp' EXIT; \
	printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../%s]\nimages: [{name: %s, newTag: "%s"}]\n' \
		"$(notdir $(abspath $(KUBE)))" "$(IMAGE)" "$(VERSION)" > $$tmp/kustomization.yaml; \
	$(KUSTOMIZE) build $$tmp

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags agent ./cmd/plumb

test: lint build test-go test-state-postgres test-python fuzz-short

# On failure the names of failed and hung tests are repeated at the end,
# where a CI log that shows only its tail still shows them.
test-go:
	@log=$$(mktemp); $(GO) test -race -count=1 -timeout 80m ./... 2>&1 | tee $$log; st=$${PIPESTATUS[0]}; \
	if [ $$st -ne 0 ]; then echo; echo "== what failed (repeated from above)"; \
		grep -E -A4 '^(--- FAIL|panic: |FAIL|running tests:)' $$log | grep -v -E '^(\s*$$|--$$)' | head -80; fi; \
	rm -f $$log; exit $$st

# The metadata's tests again, on PostgreSQL (metakv), each test in a
# database of its own on a server the tests start.
test-state-postgres:
	PLUMB_TEST_META=postgres $(GO) test -race -count=1 ./state

# Issue 44's chaos test at full length: three servers on PostgreSQL and
# MinIO, one SIGKILLed every 10 s for 3 minutes (make test runs 1).
chaos:
	PLUMB_CHAOS=3m $(GO) test -count=1 -timeout 30m -run '^TestChaosSharedServers$$' -v ./cmd/plumb

test-python: build
	PLUMB_BIN=$(CURDIR)/$(BIN) $(PYTEST) -q tests/python

fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; \
		budget=$${FUZZTIME:-$$budget}; \
		echo "fuzz $$pkg $$name for $$budget"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $$budget $$pkg; \
	done

bench: build
	$(GO) run ./bench/spine -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/agent -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/pipeline -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/dns -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/site -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/attack -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/windows -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/listing -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/streams -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/deadlines -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/drain -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/workers -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/anon -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/capture -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/dnstap -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/kafka -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/iceberg -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/meta -plumb $(CURDIR)/$(BIN)
	python3 bench/clients/consume_acks.py $(CURDIR)/$(BIN)

# bench-scale fills a server with 10^4, 10^5 and 10^6 tiny blocks (an hour
# or more on a small machine); SCALE_FLAGS=-huge adds 10^7.
bench-scale: build
	$(GO) run ./bench/scale -plumb $(CURDIR)/$(BIN) $(SCALE_FLAGS)

bench-windows: build
	$(GO) run ./bench/windows -plumb $(CURDIR)/$(BIN)

demo: build
	./scripts/demo.sh $(BIN)

clean:
	rm -rf bin
