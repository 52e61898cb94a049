GO        ?= go
BIN       ?= bin/shoal
# The server (`shoal node start` runs it; cmd/shoal-node): shoal itself
# links none of the server and finds it beside itself.
NODE_BIN  ?= $(dir $(BIN))shoal-node
# The lab (chaos, soak, fleet bench; package lab) is a binary of its own:
# shoal links none of it. Its nodes run $(BIN).
LAB_BIN   ?= bin/shoal-lab
# The egress sidecar's one program (package egress): static and tiny, for
# an image FROM scratch beside each sandbox with egress rules.
SHIM_BIN  ?= $(dir $(BIN))shoal-egress-shim
IMAGE     ?= shoal/sandbox:dev
NODE_IMAGE ?= shoal/node:dev
EGRESS_IMAGE ?= shoal/egress:dev
GOBIN     ?= $(shell $(GO) env GOPATH)/bin
# make install copies the binaries to $(PREFIX)/bin when PREFIX is set,
# else to the first GOPATH entry's bin (where go install puts commands).
PREFIX    ?=
INSTALL_DIR = $(if $(PREFIX),$(PREFIX)/bin,$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)
# The version the binaries report (`shoal version`, and the version a node
# registers): git describe, "dev" outside a git checkout. deploy/node/build.sh
# computes the same, and make node-image hands it this one.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X shoal/cli.Version=$(VERSION)
# urfave_cli_no_docs leaves out urfave/cli's man page and markdown writers
# (go-md2man, blackfriday), which no shoal command uses: less to load and
# initialise on every CLI call. deploy/node/build.sh builds with the same.
BUILD_TAGS := urfave_cli_no_docs
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
STATICCHECK_VERSION        := v0.8.2
# Generated decoders for shoal.v1 (unmarshal only): the watch cache decodes
# every record it returns again, and protobuf-go's reflective decoding of
# maps was most of a cached list's time (docs/benchmarks.md).
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.1-0.20240319094008-0393e58bdf10

.PHONY: build install run test bench image node-image cluster cluster-down proto lint chaos chaos-cluster soak soak-cluster bench-scale clean

# Static (no cgo): the chaos hosts run $(NODE_BIN) in FROM-scratch containers.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/shoal
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(NODE_BIN) ./cmd/shoal-node
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(LAB_BIN) ./cmd/shoal-lab
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(SHIM_BIN) ./cmd/shoal-egress-shim

# The binaries onto PATH: `shoal`, `shoal-node` (beside shoal, which runs
# it for `shoal node start`) and `shoal-lab`, as the docs write them.
install: build
	install -d $(INSTALL_DIR)
	install -m 0755 $(BIN) $(INSTALL_DIR)/shoal
	install -m 0755 $(NODE_BIN) $(INSTALL_DIR)/shoal-node
	install -m 0755 $(LAB_BIN) $(INSTALL_DIR)/shoal-lab
	@echo "installed shoal, shoal-node and shoal-lab in $(INSTALL_DIR)"

run: build image
	$(BIN) node start

# The compose cluster test (deploy/compose) needs docker-compose: root gets
# it installed; anyone else is told the command, and that test skips.
# TEST_P packages run at once (go test -p; default GOMAXPROCS). Four at a
# time on two cores was tried: 2 s leases lapse under that load and the
# cluster tests fail (README, Tests: the time table).
TEST_P ?= $(shell nproc 2>/dev/null || echo 2)
# TEST_FIRST: the packages that take longest, longest first (README's time
# table): go test starts packages in the order given (./... then adds the
# rest, each once), so the long ones do not start last and run on alone.
TEST_FIRST ?= ./chaos ./cli ./node ./internal/testenv ./deploy/compose ./apiserver ./chaos/hosts ./openshellapi ./store
# -trimpath: compiled code does not depend on where the checkout is, so a
# fresh clone (CI's) reuses the build cache of every earlier run instead of
# compiling every shoal package again (tests find the checkout with
# testenv.RepoRoot, not from their compiled file names).
test: build image node-image
	@command -v docker-compose >/dev/null || ./deploy/apt-install.sh docker-compose || \
		echo "make: without docker-compose the compose cluster test (deploy/compose) skips"
	SHOAL_BIN=$(CURDIR)/$(BIN) SHOAL_LAB_BIN=$(CURDIR)/$(LAB_BIN) $(GO) test -race -trimpath -count=1 -p $(TEST_P) -timeout 30m $(TEST_FIRST) ./...

bench: build image
	( $(GO) test -run '^$$' -bench UpdateLoopVsRaw -benchtime 3000x -count 3 ./bench/ && \
	  $(GO) test -run '^$$' -bench DeleteSandboxLatency -benchtime 1x -count 1 -timeout 20m ./bench/ && \
	  $(GO) test -run '^$$' -bench '^BenchmarkCreateToReady$$' -benchtime 30x -count 1 -timeout 20m ./bench/ && \
	  $(GO) test -run '^$$' -bench OpenShellCreateToReady -benchtime 30x -count 1 -timeout 20m ./bench/ && \
	  $(GO) test -run '^$$' -bench OpenShellGetListVsShoal -benchtime 1x -count 3 -timeout 20m ./bench/ && \
	  $(GO) test -run '^$$' -bench 'CachedGetVsRaw' -benchtime 3000x -count 3 ./bench/ && \
	  $(GO) test -run '^$$' -bench 'CachedListVsRaw|CreatesAt64Clients|ClientWatches|CacheMemory' -benchtime 1x -count 1 -timeout 20m ./bench/ && \
	  SHOAL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench CLIVsEtcdctl -benchtime 200x -count 1 -timeout 20m ./bench/ && \
	  SHOAL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench NodeRSS -benchtime 1x -count 1 -timeout 20m ./bench/ && \
	  SHOAL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench StopStartVsDocker -benchtime 20x -count 1 -timeout 20m ./bench/ && \
	  SHOAL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench KeystrokeEchoVsDocker -benchtime 1000x -count 1 -timeout 20m ./bench/ && \
	  SHOAL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench CopyVsDockerCp -benchtime 1x -count 1 -timeout 30m ./bench/ && \
	  $(GO) test -run '^$$' -bench '^BenchmarkEgress$$' -benchtime 5x -count 1 -timeout 20m ./bench/ && \
	  $(GO) test -run '^$$' -bench EgressPolicyAtScale -benchtime 5x -count 1 -timeout 30m ./bench/ && \
	  SHOAL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'LeaderFailover|OwnerLossDelete|Forwarding|CreateThroughput' \
	    -benchtime 1x -count 1 -timeout 30m ./bench/ ) 2>&1 | tee bench/last.txt

# The fleet-scale run (docs/benchmarks.md): 3 real and 100 hollow nodes.
bench-scale: build image
	$(LAB_BIN) bench cluster --shoal-binary $(abspath $(BIN)) --hollow-nodes 100 --sandboxes-per-node 100 --report reports/scale

# The chaos suite (docs/chaos.md). CHAOS_DURATION and SOAK_DURATION override.
CHAOS_DURATION ?= 5m
SOAK_DURATION  ?= 2h
chaos: build image
	$(LAB_BIN) chaos run --shoal-binary $(abspath $(BIN)) --scenario all --duration $(CHAOS_DURATION) --report reports/chaos

chaos-cluster: build image
	$(LAB_BIN) chaos run --shoal-binary $(abspath $(BIN)) --cluster 3 --workers 1 --scenario all --duration $(CHAOS_DURATION) --report reports/chaos-cluster

soak: build image
	$(LAB_BIN) chaos soak --shoal-binary $(abspath $(BIN)) --duration $(SOAK_DURATION) --report reports/soak

soak-cluster: build image
	$(LAB_BIN) chaos soak --shoal-binary $(abspath $(BIN)) --cluster 3 --duration $(SOAK_DURATION) --report reports/soak-cluster

# The sandbox image and the egress sidecar's (deploy/egress).
image:
	./deploy/image/build.sh $(IMAGE)
	GO=$(GO) ./deploy/egress/build.sh $(EGRESS_IMAGE)

node-image:
	GO=$(GO) VERSION='$(VERSION)' ./deploy/node/build.sh $(NODE_IMAGE)

# Three voters in containers on this host (deploy/compose). Its stdout is
# only the export lines that point the CLI at it, so that
# eval "$$(make -s cluster)" sets them: the builds and their output go to
# stderr. SHOAL_CLUSTER names a second one.
cluster:
	@$(MAKE) --no-print-directory build image node-image >&2
	@SHOAL_NODE_IMAGE=$(NODE_IMAGE) ./deploy/compose/cluster.sh up

cluster-down:
	./deploy/compose/cluster.sh down

proto:
	GOBIN=$(GOBIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(GOBIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(GOBIN):$$PATH protoc -I api --go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative api/shoal/v1/shoal.proto \
		api/openshell/v1/openshell.proto api/openshell/datamodel/v1/datamodel.proto \
		api/openshell/sandbox/v1/sandbox.proto
	GOBIN=$(GOBIN) $(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_GO_VTPROTO_VERSION)
	PATH=$(GOBIN):$$PATH protoc -I api --go-vtproto_out=api --go-vtproto_opt=paths=source_relative \
		--go-vtproto_opt=features=unmarshal api/shoal/v1/shoal.proto

lint:
	$(GO) vet ./...
	GOBIN=$(GOBIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

clean:
	rm -rf bin
