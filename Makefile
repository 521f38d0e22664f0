# Plumb. `make demo` runs the main job on the embedded default; `make test`
# runs every test (what CI runs); `make bench` measures against baselines.
GO      ?= go
BIN     := bin/plumb
PYTEST  ?= python3 -m pytest
FUZZTIME ?= 10s

# Every fuzz target as package:Name.
FUZZ_TARGETS := \
	./block:FuzzParse \
	./codecs:FuzzReaders \
	./flight:FuzzTicket \
	./flight:FuzzPutHeader \
	./pcap:FuzzReader \
	./agent:FuzzCut \
	./pipeline:FuzzParseJob

.PHONY: build test test-go test-python fuzz-short bench demo lint clean

build:
	$(GO) build -o $(BIN) ./cmd/plumb

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: lint build test-go test-python fuzz-short

test-go:
	$(GO) test -race -count=1 -timeout 30m ./...

test-python: build
	PLUMB_BIN=$(CURDIR)/$(BIN) $(PYTEST) -q tests/python

fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

bench: build
	$(GO) run ./bench/spine -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/agent -plumb $(CURDIR)/$(BIN)
	$(GO) run ./bench/pipeline -plumb $(CURDIR)/$(BIN)

demo: build
	./scripts/demo.sh $(BIN)

clean:
	rm -rf bin
