# Rover's build. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
PROTOS := $(wildcard api/rover/v1/*.proto)
# The Python interpreter that can import torch (found, or installed, by scripts/find-python).
PYTHON_EXEC ?= $(shell scripts/find-python 2>/dev/null)

.PHONY: help build test test-unit test-e2e lint generate check-generated demo bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/rover
	$(GO) build -o $(BIN)/rover ./cmd/rover

test: deps-test ## run every test (unit, integration, end-to-end with real torch)
	PYTHON_EXEC="$$(scripts/find-python)" $(GO) test -race -timeout 30m ./...

test-unit: ## run the fast tests only (no torch)
	$(GO) test -race -short ./...

deps-test: ## install what the tests need (python3-torch, protoc) when missing
	@scripts/find-python --install >/dev/null

lint: ## go vet and staticcheck
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 ./...

$(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go: go.mod
	$(GO) build -o $(BIN)/ google.golang.org/protobuf/cmd/protoc-gen-go connectrpc.com/connect/cmd/protoc-gen-connect-go

generate: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go ## regenerate the protobuf and connect code
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler" >&2; exit 1; }
	protoc --plugin=protoc-gen-go=$(BIN)/protoc-gen-go --plugin=protoc-gen-connect-go=$(BIN)/protoc-gen-connect-go \
		--go_out=. --go_opt=module=github.com/roverml/rover \
		--connect-go_out=. --connect-go_opt=module=github.com/roverml/rover \
		-I . $(PROTOS)

check-generated: generate ## fail when the committed generated code is stale
	@git diff --exit-code -- api/ || { echo "generated code is stale: run make generate and commit" >&2; exit 1; }

demo: build ## run a real elastic DDP job on two local nodes, crash a worker, watch it recover
	PYTHON_EXEC="$$(scripts/find-python --install)" examples/ddp/demo.sh

bench: build ## rendezvous benchmark (1,000 nodes)
	$(BIN)/rover bench rendezvous --nodes 1000

clean:
	rm -rf $(BIN)
