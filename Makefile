# dlock: make demo runs the demo against a throwaway redis-server, make test
# runs the whole suite. Both install Debian's Redis packages when missing.

GO ?= go
REDIS_PKGS := redis-server redis-sentinel redis-tools

.PHONY: all demo test bench soak lint redis

all: test

# redis installs Redis with apt-get when redis-server is not on PATH.
redis:
	@command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null && command -v redis-cli >/dev/null || { \
		echo "installing $(REDIS_PKGS)"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(REDIS_PKGS) >/dev/null; }

demo: redis
	$(GO) run ./cmd/dlock demo

test: redis
	$(GO) vet ./...
	$(GO) test -race -timeout 20m ./...

# bench compares dlock with the Go peers (bench/, its own module) on
# throwaway redis-servers it starts itself, prints the tables and writes
# BENCHMARKS.md and bench/wait-distribution.png. About 5 minutes.
bench: redis
	cd bench && $(GO) run . -out ../BENCHMARKS.md -png wait-distribution.png -command "make bench"

# soak runs the chaos scenarios long (over 100,000 acquisitions) and prints
# a table of acquisitions, violations, max wait and faults injected.
soak: redis
	DLOCK_SOAK=1 $(GO) test -count=1 -timeout 60m -v -run . ./internal/chaos/

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
