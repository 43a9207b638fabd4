# Rover's build. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
PROTOS := $(wildcard api/rover/v1/*.proto)
CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
KUBE_API := ./api/elastic/...
# The Kubernetes binaries the tests run against (testbin/, docs/design/k8s-testing.md).
TESTBIN ?= $(HOME)/.cache/rover/testbin-v1.37.2
TESTBIN_EXTRA ?= kubectl kube-scheduler kube-controller-manager kwok

.PHONY: help build test test-unit testbin deps-test lint generate check-generated manifests check-manifests demo bench bench-ckpt bench-ckpt-steady bench-relaunch bench-restart bench-backup bench-backup-restore bench-colltime bench-autoscale bench-ps bench-k8s soak clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build bin/rover
	$(GO) build -o $(BIN)/rover ./cmd/rover

test: deps-test testbin ## run every test (unit, integration, Kubernetes, end-to-end with real torch)
	KUBEBUILDER_ASSETS="$(TESTBIN)" PYTHON_EXEC="$$(scripts/find-python)" $(GO) test -race -timeout 30m $$($(GO) list ./... | grep -v /test/e2e)
	@# The end-to-end scenarios run after the rest, alone, with a timeout of their own: on 2 cores they
	@# take about 21 minutes alone (real jobs under faults, a Kubernetes API server, the soak).
	KUBEBUILDER_ASSETS="$(TESTBIN)" PYTHON_EXEC="$$(scripts/find-python)" $(GO) test -race -timeout 75m ./test/e2e
	CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations $(GO) test -tags nvml ./internal/nvml/

test-unit: testbin ## run the unit and integration tests only (no torch needed)
	KUBEBUILDER_ASSETS="$(TESTBIN)" $(GO) test -race $$($(GO) list ./... | grep -v /test/e2e)

testbin: ## build kube-apiserver, etcd, kubectl, kube-scheduler, kube-controller-manager and kwok into TESTBIN (once; ~7 min cold)
	TESTBIN_EXTRA="$(TESTBIN_EXTRA)" testbin/build.sh "$(TESTBIN)"

deps-test: ## install python3-torch when no Python can import torch, and gcc (cgo, for internal/nvml), chromium (the dashboard's browser test) and prometheus (promtool and a real Prometheus for the metrics tests) when missing
	@scripts/find-python --install >/dev/null
	@command -v gcc >/dev/null || scripts/apt-install gcc # cgo for internal/nvml
	@command -v chromium >/dev/null || scripts/apt-install chromium # internal/dashboard's browser test
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || scripts/apt-install prometheus # the metrics tests

lint: ## go vet and staticcheck
	$(GO) vet ./...
	CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations $(GO) vet -tags nvml ./internal/nvml/ ./cmd/rover/
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

manifests: ## regenerate the Kubernetes API's deepcopy code, CRDs (deploy/crd) and the operator's RBAC (deploy/rbac/role.yaml)
	$(CONTROLLER_GEN) object paths=$(KUBE_API)
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=$(KUBE_API) output:crd:artifacts:config=deploy/crd
	$(CONTROLLER_GEN) rbac:roleName=rover-operator paths=./internal/operator/... output:rbac:artifacts:config=deploy/rbac

check-manifests: manifests ## fail when the committed deepcopy code, CRDs or RBAC are stale
	@out=$$(git status --porcelain -- deploy/crd deploy/rbac ':(glob)api/elastic/**/zz_generated.*'); test -z "$$out" || \
		{ echo "Kubernetes manifests are stale: run make manifests and commit" >&2; echo "$$out" >&2; exit 1; }

demo: build ## run a real elastic DDP job on two local nodes, crash a worker, watch it recover
	PYTHON_EXEC="$$(scripts/find-python --install)" examples/ddp/demo.sh

bench: build ## rendezvous (1,000 and 10,000 nodes), shard leasing (memory, durable, a 2^32-sample shuffled dataset), master recovery, micro-benchmarks
	$(BIN)/rover bench rendezvous --nodes 1000
	$(BIN)/rover bench rendezvous --nodes 10000 --conns 32
	$(BIN)/rover bench shards --clients 256 --batch 32
	$(BIN)/rover bench shards --clients 256 --batch 1 --agents 8
	$(BIN)/rover bench shards --clients 256 --batch 1 --agents 8 --durable
	$(BIN)/rover bench shards --clients 256 --batch 1 --agents 32
	$(BIN)/rover bench shards --clients 256 --batch 1 --agents 32 --durable
	$(BIN)/rover bench shards --clients 64 --batch 4 --size 4294967296 --shard-size 512 --shuffle
	$(BIN)/rover bench recovery --nodes 1000 --shards 1000000
	$(GO) test -run '^$$' -bench . -benchmem ./internal/rendezvous/ ./internal/liveness/ ./internal/store/ ./internal/nodecheck/
	$(GO) test -run '^$$' -bench JournalHour -benchtime 1x ./internal/master/
	$(GO) test -run '^$$' -bench 'OrderAt|EpochOrder|LeaseCompleteShuffled' -benchmem ./internal/shard/

bench-ckpt: build ## flash checkpoint benchmark: 1 GiB state, save/restore vs copy, torch.save, torch.load
	@out=$$(mktemp); PYTHON_EXEC="$$(scripts/find-python --install)" $(BIN)/rover run --standalone --nproc-per-node 1 \
		examples/flash_ckpt/bench.py --gib $${GIB:-1} --json $$out && cat $$out && echo && rm -f $$out

bench-ckpt-steady: build ## flash checkpoint steady state: save of a 4 MiB state vs a copy; busy steps with persistence on vs off (2 workers)
	@out=$$(mktemp); dir=$$(mktemp -d); PYTHON_EXEC="$$(scripts/find-python --install)" $(BIN)/rover run --standalone \
		--nproc-per-node 2 --checkpoint-dir $$dir examples/flash_ckpt/steady.py --mib $${MIB:-4} --json $$out && \
		cat $$out && echo; rm -rf $$out $$dir

bench-relaunch: ## node death to training again on rover submit, by phase (detect, launch, rendezvous, worker, init, restore)
	PYTHON_EXEC="$$(scripts/find-python --install)" $(GO) test ./test/e2e -run '^$$' -bench NodeRelaunch -benchtime $${RUNS:-5}x

bench-backup: ## sharded backup peers' cost: a 256 MiB shard pushed to the backup peer over loopback, its shared memory, a save alone and while a push runs
	$(GO) test ./internal/agent/ckptsaver/ -run '^$$' -bench BackupPush -benchtime $${RUNS:-5}x

bench-backup-restore: ## a lost node of a sharded rover submit job: steps rolled back and time to train again, with backup peers and with storage only
	PYTHON_EXEC="$$(scripts/find-python --install)" $(GO) test ./test/e2e -run '^$$' -bench ShardedNodeLoss -benchtime $${RUNS:-3}x -timeout 60m

bench-restart: ## worker SIGKILL to training again on rover run, 2 workers, by phase (detect, stop, persist, rendezvous, spawn, import, pg, restore, first step)
	PYTHON_EXEC="$$(scripts/find-python --install)" $(GO) test ./test/e2e -run '^$$' -bench WorkerRestart -benchtime $${RUNS:-10}x -timeout 30m

bench-colltime: ## collective timing's cost: the DDP example's step time with the worker hook (ROVER_COLLECTIVE_TIMING=$TIMING, 1 or always) and without (0), interleaved pairs; STEP_SLEEP for longer steps
	PYTHON_EXEC="$$(scripts/find-python --install)" COLLTIME_ALLREDUCE=$${ALLREDUCE:-ordered} COLLTIME_TIMING=$${TIMING:-1} COLLTIME_STEP_SLEEP=$${STEP_SLEEP:-0} $(GO) test ./test/e2e -run '^$$' -bench CollectiveTimingOverhead -benchtime $${RUNS:-10}x -timeout 30m

bench-autoscale: ## auto-scaling on rover submit: wall time, throughput and node-seconds of the same job on fixed MIN, fixed MAX and --auto-scale, linear and saturating
	PYTHON_EXEC="$$(scripts/find-python --install)" $(GO) test ./test/e2e -run '^$$' -bench AutoScale -benchtime $${RUNS:-1}x -timeout 60m

bench-ps: ## parameter-server jobs on rover submit: a PS's SIGKILL, and a hot PS's migration, to the new PS serving and its first step
	PYTHON_EXEC="$$(scripts/find-python --install)" $(GO) test ./test/e2e -run '^$$' -bench 'PS(Recovery|Migration)$$' -benchtime $${RUNS:-5}x -timeout 30m

soak: build ## goodput of a real 2-worker DDP job under faults (default 10 minutes, 1 worker fault a minute), Rover against a torchrun baseline
	PYTHON_EXEC="$$(scripts/find-python --install)" $(BIN)/rover soak --duration $${DURATION:-10m} --fault-rate $${RATE:-1} --faults $${FAULTS:-worker}

bench-k8s: testbin ## 100 worker pods failing at once on a real API server: time to 100 replacements Running
	KUBEBUILDER_ASSETS="$(TESTBIN)" $(GO) test ./internal/kubemaster -run '^$$' -bench Relaunch100Pods -benchtime $${RUNS:-3}x

clean:
	rm -rf $(BIN)
