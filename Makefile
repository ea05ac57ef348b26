# vgpud: see README.md. `make demo` and `make test` are the two entry points.
SHELL := /bin/bash
GO ?= go
# The release is version.go's (a clone carries no tags); VERSION=...
# builds another's. The commit is the tree's, -dirty when it has changes.
VERSION ?=
COMMIT ?= $(shell git describe --always --dirty --abbrev=7 --exclude '*' 2>/dev/null || echo unknown)
LDFLAGS := -X main.commit=$(COMMIT) $(if $(VERSION),-X main.version=$(VERSION))
# As the image ships it: no paths or debug info in the binary, and
# without urfave/cli's man-page and markdown generators, which vgpud never
# calls and whose markdown library builds a 0.5 MB table at start.
TAGS := urfave_cli_no_docs
BUILDFLAGS = -trimpath -ldflags "-s -w $(LDFLAGS)"
PKGS := ./...
# go-nvml's cgo calls functions NVML marks deprecated; the compiler's
# warnings about them are go-nvml's, not ours, and read as errors.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: chart structlint build-arm64 build-next all build bench-floor images image push manifests unit test lint vet fmt-check size-check fuzz e2e chaos demo bench clean nvml

all: build

build:
	$(GO) build -tags $(TAGS) $(BUILDFLAGS) -o bin/vgpud .

# vgpud for arm64 nodes (Grace Hopper), cross-compiled with Debian's
# aarch64 toolchain and libc: go-nvml needs cgo. make image puts it beside
# the host's build in one image index.
build-arm64:
	CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc $(GO) build -tags $(TAGS) $(BUILDFLAGS) -o bin/vgpud-arm64 .

# The end-to-end suite's stand-in for a newer release, run on one node
# ahead of the others: it writes wire fields this release does not know
# (protocol/newer_skewnext.go). Never shipped.
build-next:
	$(GO) build -tags $(TAGS),skewnext -trimpath -ldflags "-s -w -X main.version=next -X main.commit=$(COMMIT)" -o bin/vgpud-next .

# make bench's memory floors (scripts/bench/nodefloor, leaderfloor), built as vgpud is.
bench-floor:
	$(GO) build -tags bench,$(TAGS) $(BUILDFLAGS) -o bin/nodefloor ./scripts/bench/nodefloor
	$(GO) build -tags bench,$(TAGS) $(BUILDFLAGS) -o bin/leaderfloor ./scripts/bench/leaderfloor

# OCI tarballs for the local cluster (pause, busybox, vgpud, kube-scheduler) in bin/images.
images:
	bash scripts/images.sh

# vgpud's image, without Docker (scripts/image, go-containerregistry):
#   make image                            bin/images/vgpud.tar (OCI layout: an
#                                         index of linux/amd64 and linux/arm64)
#   make push IMAGE=registry/repo:tag     push it; prints IMAGE@digest
#   make manifests IMAGE=registry/repo:tag   bin/vgpud.yaml, the install
#                                         manifest pinned to IMAGE's digest
#     KUBERNETES=v1.35.2                  made for a cluster of that version
#                                         (kubectl version): what the chart
#                                         renders there
# REGISTRY_CA=ca.pem trusts a private registry's CA beside the system's;
# credentials come from docker login's config or a credential helper.
IMAGE ?=
REGISTRY_CA ?=
KUBERNETES ?=
image:
	bash scripts/images.sh vgpud >/dev/null

push: image
	@[ -n "$(IMAGE)" ] || { echo "make push IMAGE=<registry>/<repository>:<tag>" >&2; exit 2; }
	bin/image push --from bin/images/vgpud.tar --to "$(IMAGE)" $(if $(REGISTRY_CA),--ca "$(REGISTRY_CA)")

manifests:
	@[ -n "$(IMAGE)" ] || { echo "make manifests IMAGE=<registry>/<repository>:<tag>" >&2; exit 2; }
	$(GO) build -o bin/image ./scripts/image
	bin/image pin --image "$(IMAGE)" $(if $(REGISTRY_CA),--ca "$(REGISTRY_CA)") $(if $(KUBERNETES),--kubernetes "$(KUBERNETES)") <manifests/vgpud.yaml >bin/vgpud.yaml
	bin/image pin --image "$(IMAGE)" $(if $(REGISTRY_CA),--ca "$(REGISTRY_CA)") <manifests/node-revert.yaml >bin/node-revert.yaml
	@echo "bin/vgpud.yaml: vgpud as $$(grep -m1 -o 'image: .*vgpud.*' bin/vgpud.yaml | cut -d' ' -f2); bin/node-revert.yaml: removal's first step"

# Fast tests: no cluster, no root. scripts/promcheck is its own module
# (Prometheus's discovery and the Operator's types, kept out of go.mod).
unit:
	$(GO) test -count=1 $(PKGS)
	cd scripts/promcheck && $(GO) test -count=1 ./...

# The tagged suites (scripts/e2e, scripts/e2e/cluster, scripts/bench) are
# vetted too, and the stand-in for a newer release (skewnext).
vet:
	$(GO) vet $(PKGS)
	cd scripts/promcheck && $(GO) vet ./...
	$(GO) vet -tags e2e,bench,skewnext $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Build outputs must never be committed: every clone pays for them.
size-check:
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > 1048576'); \
	if [ -n "$$big" ]; then echo "tracked files over 1 MB (build outputs? add them to .gitignore):"; echo "$$big"; exit 1; fi

# The structure's rules (scripts/structlint): the role wall (node-role and
# cluster-role code never import each other; internal/ covers each role's
# own parts), flags only in parts' packages, no exported type name in two
# packages, no unit test sleeping on the wall clock. Its test plants each
# fault in a tree of its own and sees it fail.
structlint:
	$(GO) run ./scripts/structlint .

lint: vet fmt-check size-check structlint

# A short run of every fuzz target, so regressions in the decoders show up in CI.
# Budgets are counts of inputs, about 5-10 s each here, not durations: Go
# 1.26's fuzz coordinator can report "context deadline exceeded" at a
# -fuzztime deadline with no failing input (go.dev/issue/75804, fixed in
# 1.27), as a CI run of FuzzDecode did under load.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 100000x ./protocol
	$(GO) test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime 20000x ./webhook
	$(GO) test -run '^$$' -fuzz '^FuzzExtenderBodies$$' -fuzztime 20000x ./cluster/internal/extender

# The end-to-end suites (root): vgpud as processes against etcd + kube-apiserver
# built from source, then the real cluster of VGPUD_NODES nodes (default 3;
# scripts/cluster.sh) with vgpud installed from manifests/, ending with a
# 3-round chaos soak.
e2e:
	bash scripts/e2e.sh

# The chaos soak alone on a fresh cluster: make chaos ROUNDS=20.
ROUNDS ?= 20
chaos:
	ROUNDS=$(ROUNDS) bash scripts/chaos.sh

# The node role on a real NVIDIA GPU and driver, and the proof that it holds
# each container's GPU memory (needs CuPy for the fault, PyTorch or CuPy for
# scripts/nvml/hog.py, root to make cgroups;
# INTERPOSER=<dir with HAMi-core's libvgpu.so> adds the interposer test);
# see docs/development-real-gpu.md. Not part of make test: CI has no GPU.
INTERPOSER ?=
nvml:
	VGPUD_TEST_NVML=1 VGPUD_TEST_NVML_FAULT="python3 $(CURDIR)/scripts/nvml/fault.py" VGPUD_TEST_NVML_HOG="python3 $(CURDIR)/scripts/nvml/hog.py" \
		VGPUD_TEST_NVML_INTERPOSER="$(if $(INTERPOSER),$(abspath $(INTERPOSER)))" VGPUD_TEST_NVML_PROBE="python3 $(CURDIR)/scripts/nvml/probe.py" \
		$(GO) test -count=1 -v -run NVML ./node ./node/internal/gpu

# The Helm chart (charts/vgpud, generated from manifests/: see
# manifests/chart_test.go): helm lint with its defaults and with other
# names, and its renders compared with the manifest. Helm is built from
# the Go module proxy, once (scripts/helm.sh).
CHART_LINT := --set image.repository=registry.example.com/gpu/vgpud --namespace vgpud-system
CHART_OTHER := --namespace gpu-share --set schedulerName=gpu-sched,fullnameOverride=gpu-share,nameOverride=gshare,resourceNames.gpu=example.com/vgpu,monitoring.serviceMonitor=true,monitoring.prometheusRule=true --set 'gpuAgentAccounts={nvidia-dcgm-exporter,dcgm}'
chart:
	@set -o pipefail; helm=$$(bash scripts/helm.sh) && \
	$$helm lint --strict charts/vgpud $(CHART_LINT) && \
	$$helm lint --strict charts/vgpud $(CHART_LINT) --kube-version 1.34.4 && \
	$$helm lint --strict charts/vgpud $(CHART_LINT) $(CHART_OTHER) && \
	VGPUD_HELM=$$helm $(GO) test -count=1 -v -run 'TestChart' ./manifests/ | grep -E '^(---|ok|FAIL|\s+chart)'

# Everything the project has.
test: lint unit fuzz chart e2e

# The main job: a local three-node cluster with mock GPUs, vgpud from manifests/,
# sample sharing workloads placed and shown (scripts/demo.sh).
demo:
	bash scripts/demo.sh

# Every benchmark, one table, also written to bench/results.md (root; 20 to 25 minutes).
bench:
	bash scripts/bench.sh

clean:
	rm -rf bin
