# rollprobe — see README.md. Heavy builds (the lab's Kubernetes components,
# reference tools for benchmarks) are cached under $(CACHE), outside the repo.
SHELL := /bin/bash
# sudo's restricted PATH usually hides Go: find it where the official
# installer puts it.
export PATH := $(PATH):/usr/local/go/bin
CACHE ?= $(HOME)/.cache/rollprobe
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/rollprobe/rollprobe/cmd.Version=$(VERSION)
TOOLS := $(CACHE)/tools
STATICCHECK := $(TOOLS)/staticcheck
# goreleaser, pinned (v2.15.1 is the newest that builds with Go 1.26 from the
# module proxy alone), built once into the cache.
GORELEASER_VERSION := v2.15.1
GORELEASER := $(TOOLS)/goreleaser-$(GORELEASER_VERSION)/goreleaser

.PHONY: all build image release-snapshot demo demo-probe test test-short lint fuzz bench bench-h2 bench-https bench-go lab-deps lab-bins lab-up lab-down clean

all: build

build: ## build bin/rollprobe and bin/demoapp (static: the lab runs them as container images)
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/rollprobe .
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/demoapp ./lab/demoapp

image: ## the release image (OCI image layout tars, no Docker engine) for linux/amd64 and linux/arm64, in dist/
	@for arch in amd64 arm64; do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch go build -trimpath -ldflags '$(LDFLAGS)' -o dist/linux_$$arch/rollprobe . && \
	  go run ./internal/ociimage/mkimage -binary dist/linux_$$arch/rollprobe -arch $$arch \
	    -name docker.io/rollprobe/rollprobe:$(VERSION) -out dist/rollprobe-image-$$arch.tar || exit 1; \
	done

# RELEASE_JOBS=N: the release snapshot runs at most N compiles at once
# (goreleaser's own build, its platforms' builds, the image tool's), where by
# default each fills every core. CI sets 1: it builds the release, niced,
# beside the lab's tests, which leave about one of the two cores idle.
RELEASE_JOBS ?=
RELEASE_ENV := $(if $(RELEASE_JOBS),GOFLAGS=-p=$(RELEASE_JOBS))

$(GORELEASER):
	GOBIN=$(dir $@) GOFLAGS=$(if $(RELEASE_JOBS),-p=$(RELEASE_JOBS)) go install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)

release-snapshot: $(GORELEASER) ## the whole release, locally, in dist/: archives (linux, darwin x amd64, arm64), checksums.txt, the krew manifest, the multi-platform image (RELEASE_JOBS=1: one compile at a time)
	$(RELEASE_ENV) $(GORELEASER) release --snapshot --clean $(if $(RELEASE_JOBS),--parallelism $(RELEASE_JOBS))
	$(RELEASE_ENV) go run ./internal/ociimage/mkimage -goreleaser dist

# Root-only targets re-run themselves with sudo when not root, keeping
# PATH (sudo's secure_path hides Go), so one command works in a root
# container without sudo and on a workstation with it.
AS_ROOT = if [ "$$(id -u)" -ne 0 ]; then command -v sudo >/dev/null || { echo "$@ needs root, and sudo is not installed" >&2; exit 2; }; \
	echo "$@ needs root: running it with sudo"; exec sudo env PATH="$$PATH" $(MAKE) $@; fi

demo: ## the newcomer's demo (root; re-run with sudo when not root): the lab, a naive and a graceful rollout under rollprobe run
	@$(AS_ROOT); $(MAKE) build lab-bins && bash lab/demo.sh

demo-probe: build ## no root, no cluster: probe a local app through a naive restart
	bash lab/demo-probe.sh

# ROLLPROBE_RELEASE_LOCK (CI sets it): a lock file held while the release
# snapshot is built beside the lab's tests. Only the release's own tests read
# dist/: they run last, once they can take it, or after 30 min (a cold run's
# release took 20 min niced, most of it beside the lab's tests): a release
# that hangs is then named in the log by its tests' failures, where they
# would otherwise wait in silence (.ci/run ends it at its own bound, 45 min,
# and fails). The other units do not wait for it: on a slow machine (CI,
# 2026-12-02) the release was still building when the lab's tests ended, the
# units waited for it, and the runner ended the run at 90 minutes in them.
# The lab's -timeout guards against a hang; it is no bar: the lab's tests
# took 1,276-2,031 s in CI runs (docs/lab.md). On 2026-12-02's slow machine
# they took 2,282 s alone and, beside CI's niced release and lint, had run
# 2,409 s when TestLab, 5 minutes from the 45-minute -timeout, started no
# more (five subtests, some 300 s of them, left): 55 minutes leave that
# machine room. A hang in a cold run (the lab's tests start 15 to 30 min in)
# may now meet the runner's 90-minute limit first, and CI's log then ends
# without the lab's output: the price of not failing a slow machine's
# healthy run.
test: ## every test (what CI runs; an allocation count, which -race makes meaningless, again without it), one package at a time (the engine's and the lab's tests measure schedules and rollouts: on 2 CPUs they must not share them); the lab's first (CI builds the release snapshot and lints beside them, niced, in their idle time), the release's last (they wait for CI's snapshot); says loudly when the lab's or the browser's end-to-end tests were skipped
	@skipped=$$(mktemp); trap 'rm -f "$$skipped"' EXIT; \
	ROLLPROBE_LAB_SKIPPED=$$skipped go test -race -count=1 -timeout 55m ./lab; lab=$$?; \
	ROLLPROBE_LAB_SKIPPED=$$skipped go test -race -count=1 -p 1 $$(go list ./... | grep -v -e '/lab$$' -e '/internal/release$$'); units=$$?; \
	go test -count=1 -run TestNoAllocations ./internal/hpackdec; allocs=$$?; \
	if [ -n "$$ROLLPROBE_RELEASE_LOCK" ]; then echo "test: the release's tests wait for the release snapshot (they read dist/) ..."; \
	  flock -w 1800 "$$ROLLPROBE_RELEASE_LOCK" true || echo "test: the release snapshot is still running after 30 min: its tests go on and will say what dist/ lacks"; fi; \
	ROLLPROBE_LAB_SKIPPED=$$skipped go test -race -count=1 ./internal/release; release=$$?; \
	status=0; if [ $$lab -ne 0 ] || [ $$units -ne 0 ] || [ $$allocs -ne 0 ] || [ $$release -ne 0 ]; then status=1; fi; \
	if [ -s "$$skipped" ]; then \
	  echo; echo "*** End-to-end tests were SKIPPED (the rest ran):"; sed 's/^/***   /' "$$skipped"; \
	  echo "*** The lab's need root, 'make lab-deps' (nftables, runc, busybox-static) and 'make lab-bins'; the browser test needs Debian's chromium; the nginx capture test root, tcpdump and nginx-light; the h2 frame test tshark;"; \
	  echo "*** the release's tests 'make release-snapshot' and skopeo; the OpenMetrics test python3-prometheus-client."; \
	  echo "*** ROLLPROBE_REQUIRE_LAB/BROWSER/NGINX/RELEASE/TOOLS=1 make such a skip a failure (CI sets them)."; \
	fi; exit $$status

test-short: ## unit tests only: no binary built or run, no traffic, no lab (about 20 s)
	go test -count=1 -short ./...

$(STATICCHECK):
	GOBIN=$(TOOLS) GOFLAGS= go install honnef.co/go/tools/cmd/staticcheck@v0.8.2

# lint vets with make build's flags (CGO_ENABLED=0, -trimpath; no package
# here uses cgo): its compiles of the dependencies are then those a build
# left in the build cache (measured with an empty cache: 150 s alone, 55 s
# after a build).
lint: $(STATICCHECK) ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	CGO_ENABLED=0 go vet -trimpath ./...
	$(STATICCHECK) ./...

fuzz: ## run the response parser fuzzer for a minute
	go test ./prober -run XXX -fuzz FuzzReadResponse -fuzztime 60s

bench-go: ## Go benchmarks: parser, recorder, and the dashboard's cost to throughput
	go test ./prober -run XXX -bench . -benchmem
	go test ./tui -run XXX -bench DashboardOverhead -benchtime 1x

bench-conntrack: ## the prober's throughput with the conntrack watch on and off (root: a network namespace of its own)
	@$(AS_ROOT); go test -c -o $(CACHE)/natwatch.test ./natwatch && \
	unshare --net sh -c 'ip link set lo up && nft -f natwatch/testdata/track.nft && sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_time_wait=1 && cd natwatch && \
	  ROLLPROBE_BENCH_NETNS=1 $(CACHE)/natwatch.test -test.run XXX -test.bench Conntrack -test.benchtime 1x'

bench: build ## side-by-side benchmarks against wrk, fortio and nginx (see bench/RESULTS.md)
	bash bench/bench.sh

bench-h2: build ## HTTP/2 and gRPC against h2load (on a local nginx, h2c) and ghz (on grpc-go's health server) (bench/RESULTS-h2.md)
	bash bench/h2.sh

bench-https: build ## what https costs (the goroutine engine) against wrk and fortio on a local nginx (bench/RESULTS-https.md)
	bash bench/https.sh

LAB_DEBS := iproute2 nftables conntrack runc busybox-static

lab-deps: ## Debian packages the lab needs ($(LAB_DEBS)), installed when missing
	@missing=$$(for p in $(LAB_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "lab-deps: installing" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi

lab-bins: lab-deps ## build etcd, the Kubernetes components, containerd, the CNI plugins, CoreDNS and Traefik into $(CACHE)/lab-bins (cold: see README; cached)
	ROLLPROBE_CACHE=$(CACHE) lab/tools/build.sh

lab-up: ## bring the lab up (root; re-run with sudo when not root)
	@$(AS_ROOT); $(MAKE) build lab-bins && bin/rollprobe lab up --bins "$$(ROLLPROBE_CACHE=$(CACHE) lab/tools/build.sh 2>/dev/null)"

lab-down: ## take the lab down (root; re-run with sudo when not root)
	@$(AS_ROOT); bin/rollprobe lab down

clean:
	rm -rf bin dist test-artifacts
