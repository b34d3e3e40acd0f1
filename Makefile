# dlock: make demo runs the demo against a throwaway redis-server, or, with
# none on PATH, on an embedded Redis-compatible server (no install needed).
# make test lints (gofmt, go vet, staticcheck) and tests every module (dlock,
# bench/, dlockotel/, dlockrueidis/, dlocktest/, fencetest/, uitest/,
# verify/); it installs Debian's Redis packages when missing, PostgreSQL's
# (fencetest/ starts a server), chromium (uitest/ drives dlock ui's page in
# it) and iproute2 (verify/ builds network namespaces), as make verify does.

GO ?= go
REDIS_PKGS := redis-server redis-sentinel redis-tools tmux

.PHONY: all demo test bench soak verify mutate lint redis postgres chromium netns

# STATICCHECK runs staticcheck at a fixed version, built from the Go module
# proxy on first use and cached by the go command afterwards.
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

all: test

# redis installs Redis with apt-get when redis-server is not on PATH (and
# tmux, which the test of dlock top drives).
redis:
	@command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null && command -v redis-cli >/dev/null && command -v tmux >/dev/null || { \
		echo "installing $(REDIS_PKGS)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(REDIS_PKGS) >/dev/null; }

# postgres installs Debian's PostgreSQL when it is missing: fencetest/
# starts a throwaway server from /usr/lib/postgresql/*/bin (as the
# package's postgres user when run as root).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing postgresql"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; }

# chromium installs Debian's chromium when /usr/bin/chromium is missing:
# uitest/ loads dlock ui's page in it, headless, through chromedp.
chromium:
	@test -x /usr/bin/chromium || { \
		echo "installing chromium"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# netns installs iproute2 with apt-get when ip is not on PATH: verify/
# builds its networks from namespaces, veth pairs and blackhole routes, all
# iproute2 (no iptables).
netns:
	@command -v ip >/dev/null || { \
		echo "installing iproute2"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq iproute2 >/dev/null; }

# demo installs nothing: without redis-server on PATH the demo runs on the
# embedded server (cmd/dlock/demo_embedded.go) and says so.
demo:
	$(GO) run ./cmd/dlock demo

# MODULES are the directories with a go.mod: dlock itself and the modules
# beside it (bench/, ...), each vetted and tested on its own.
MODULES := $(sort $(dir $(shell find . -name go.mod -not -path '*/.*' -not -path '*/testdata/*')))

# test runs go test -race in every module, in lanes side by side
# (scripts/test.sh): the root package's tests split over three processes,
# the root module's other packages, and the other modules in turn.
test: redis postgres chromium netns lint
	GO=$(GO) scripts/test.sh $(MODULES)

# bench compares dlock with the Go peers (bench/, its own module) on
# throwaway redis-servers it starts itself, prints the tables, splices them
# into BENCHMARKS.md between its generated markers (the hand-written text
# around them is kept) and writes bench/wait-distribution.png. About 7
# minutes (about 12 with every scenario). One scenario quickly, printed only
# (BENCHMARKS.md untouched):
#   cd bench && go run . -only hot -duration 5s              # ~2 min, 3 rounds
#   cd bench && go run . -only hot -duration 5s -rounds 1 -libs dlock,rueidislock
#   cd bench && go run . -only sem                         # permit semaphore, ~30 s
#   cd bench && go run . -only floor                       # Redis cost of Redisson's, dlock's and SET NX's scripts, ~40 s
#   cd bench && go run . -only watchdog -libs dlock -wd-locks 1000000 -wd-lease 30s -duration 20s  # 1 M locks
# Scenarios: unc, floor, hot, redlock, watchdog, waiters, sem; go run . -h lists the flags.
bench: redis
	cd bench && $(GO) run . -out ../BENCHMARKS.md -png wait-distribution.png -command "make bench"

# soak runs the chaos scenarios long (over 100,000 acquisitions) and prints
# a table of acquisitions, violations, max wait and faults injected.
soak: redis
	DLOCK_SOAK=1 $(GO) test -count=1 -timeout 60m -v -run . ./internal/chaos/

# verify runs the Jepsen-style matrix (verify/, its own module): Redis, its
# replicas and sentinels and the client processes each in a network
# namespace of their own, with partitions, pauses past the lease, kill -9
# of the master, and the histories checked with porcupine, a lost-update
# counter and a fenced register; prints one table (docs/analysis.md). About
# 30 minutes, as root. Fails if a negative control (a deliberately broken
# client) escapes its checker. A 3-minute smoke runs in make test; one
# part only: cd verify && go run ./cmd/verify -only sentinel
verify: redis netns
	cd verify && $(GO) run ./cmd/verify

# mutate applies each deliberate breakage listed in scripts/mutate.sh (the
# re-send guard, the publish of a release, the late-reply check, the
# fencing increment, the resubscribe wake-up, the watchdog's lost notice,
# the hand-over bound...) to a scratch copy of the tree, builds its
# package's test binary once and runs only the tests the list names for
# it, four mutations at a time with at most one compile per CPU
# (MUTATE_JOBS=n, MUTATE_BUILDS=n for other numbers); it prints
# a table mutation -> failing test, with seconds, and fails if any mutation
# survives. Not part of make test: run it before resolving engine changes.
# BASE=main runs only the mutations whose file changed since main,
# committed or not; one mutation by name: scripts/mutate.sh fence
# (postgres and netns: the list has fencetest/'s and verify/'s breakages.)
mutate: redis postgres netns
	GO=$(GO) scripts/mutate.sh $(if $(BASE),--base $(BASE))

# lint checks every module: gofmt, go vet and staticcheck.
lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt -l:"; gofmt -l .; exit 1; }
	@set -e; for m in $(MODULES); do \
		echo "== lint $$m"; \
		( cd $$m && $(GO) vet ./... && $(STATICCHECK) ./... ); \
	done
