#!/usr/bin/env bash
# mutate.sh: deliberate breakages of dlock, each applied to a scratch copy
# of the working tree, with the test that must catch it. A mutation
# survives when its tests still pass: the table printed at the end says
# which test caught each one, and the script exits 1 if any survived, any
# could not be applied (the code it edits changed: update the list), or
# the tests fail on the unmutated tree.
#
#   scripts/mutate.sh            # every mutation (make mutate)
#   scripts/mutate.sh fence      # the mutations whose name contains "fence"
#
# Each mutation is one literal text replacement in one file, which must
# match exactly once. The copies live under $MUTATE_DIR (default: a fresh
# temporary directory) and are removed at the end.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=${MUTATE_DIR:-$(mktemp -d /tmp/dlock-mutate.XXXXXX)}
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
filter=${1:-}
GO=${GO:-go}

# The list: name | file | text to find | replacement | package | tests (a
# go test -run pattern, anchored) that must fail. A run in which no test
# ran is an error of the list, not a catch.
m_name=() m_file=() m_from=() m_to=() m_pkg=() m_tests=()
m() { m_name+=("$1") m_file+=("$2") m_from+=("$3") m_to+=("$4") m_pkg+=("$5") m_tests+=("$6"); }

# A re-sent release (go-redis lost the first reply) finds the field gone
# and answers -1; the Client must read that as released, not as "not held".
m "release: re-sent -1 read as not held" kind.go \
  'case n < 0 && !resent:' \
  'case n < 0 && !resent || n < 0:' \
  . '^(TestLostReplyIsNotAppliedTwice)$'
# Acquire sets the owner's field to 1; counting in Redis would make a
# re-sent acquire (and every re-entry) raise Redisson's view of the count.
m "acquire script increments the hold count" internal/scripts/lock_acquire.lua \
  "  held = true
else" \
  "  held = true
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
else" \
  . '^(TestLostReplyIsNotAppliedTwice)$'
# Without the publish, waiters of other processes sleep until the lease.
m "release does not publish" internal/scripts/lock_release.lua \
  "redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1" \
  "return 1" \
  . '^(TestWaiterWokenByUnlock)$'
# A reply that comes after the lease it set ran out is not a hold.
m "late-reply check disabled" acquire.go \
  'case res.acquired && time.Since(start) >= validity(h.kind, req.lease):' \
  'case false && res.acquired && time.Since(start) >= validity(h.kind, req.lease):' \
  . '^(TestLateReplyIsNotAHold)$'
# With a client that ends requests at their deadline, an attempt with a
# deadline runs on the caller's goroutine, with the caller's ctx.
m "attempt with a deadline handed to a goroutine" acquire.go \
  'if ctx.Done() == nil || h.c.deadlines && hasDeadline(ctx) {' \
  'if ctx.Done() == nil {' \
  . '^(TestAttemptOnCallersContext)$'
# The first acquisition's short path (lock_acquire_free.lua) must check
# that the lock is free, and a fenced one must take a new token.
m "free path grants a held lock" internal/scripts/lock_acquire_free.lua \
  "and redis.call('exists', KEYS[1]) == 0 then" \
  "then" \
  . '^(TestSharedHandleExcludes|TestMutualExclusion)$'
m "free path takes no token" internal/scripts/lock_acquire_free.lua \
  "return {1, redis.call('incr', KEYS[2])}" \
  "return {1, 1}" \
  . '^(TestFencingTokens)$'
# The acquire script grants the lock whoever holds it.
m "acquire grants unconditionally" internal/scripts/lock_acquire.lua \
  "else
  return {0, redis.call('pttl', KEYS[1])}" \
  "else
  redis.call('hset', KEYS[1], ARGV[2], 1)" \
  . '^(TestSharedHandleExcludes|TestMutualExclusion)$'
# The confirmation of a resubscription after a reconnect must wake every
# waiter: unlock messages sent while the connection was down are lost.
m "no wake-up on resubscription" internal/pubsub/hub.go \
  'if !ours || ch.moved {' \
  'if false {' \
  . '^TestContract$/.*/^MissedNotice$'

m "no wake-up on resubscription (chaos)" internal/pubsub/hub.go \
  'if !ours || ch.moved {' \
  'if false {' \
  ./internal/chaos '^(TestPubSubKills)$'
# Fencing tokens must go up with every acquisition.
m "fencing token not incremented" internal/scripts/fence.lua \
  "return redis.call('incr', counter)" \
  "return tonumber(redis.call('get', counter) or '0')" \
  . '^(TestFencingTokens)$'
# The watchdog tells a holder at its next renewal that the lock is gone,
# not only when the local lease deadline passes.
m "watchdog does not report a lost lock" renew.go \
  'c.lose(hd, fmt.Errorf("%w: %q: the watchdog found it released' \
  '_ = fmt.Sprint(hd, fmt.Errorf("%w: %q: the watchdog found it released' \
  . '^(TestLostWhenDeleted)$'
# A release that fails while Redis restarts is sent again in the
# background, and so is the give-back of an attempt whose reply was lost:
# otherwise the lock stays taken for its lease. (The chaos scenario
# TestRedisRestart catches these too, but only when a kill meets an
# Unlock or a reply in flight: not on every run.)
m "failed release not retried" release.go \
  '	if !retrying(err) {' \
  '	if true || !retrying(err) {' \
  . '^(TestReleaseOutlivesOutage)$'
m "failed give-back not retried" acquire.go \
  'until := time.Now().Add(validity(h.kind, req.lease))' \
  'until := time.Now()' \
  . '^(TestGiveBackOutlivesOutage)$'
# A Client hands a lock to its own waiters at most handoffBound times in a
# row while another process waits for it.
m "hand-over not bounded" handoff.go \
  'case q.handoffs < handoffBound:' \
  'case true:' \
  . '^(TestHandoffBoundLetsOthersIn)$'
# A batched script goes out with a pipeline that go-redis writes again
# after a lost reply; a queued caller whose ctx ends leaves the queue.
m "batch: queued caller ignores its ctx" batch.go \
  'if b.withdraw(q) {' \
  'if false && b.withdraw(q) {' \
  . '^(TestBatchedScriptGivenUp)$'
# On a cluster one frozen master would hold up every batch.
m "batch: cluster scripts batched" client.go \
  'batcher{rdb: rdb, off: isCluster(rdb)}' \
  'batcher{rdb: rdb, off: false}' \
  . '^(TestClusterFrozenMasterHoldsUpNoOther)$'
# With ContextTimeoutEnabled a script with a deadline is sent alone: in a
# batch it would run under the batch's latest deadline, or none.
m "batch: deadline scripts batched" batch.go \
  'if b.off || b.deadlines && hasDeadline(ctx) {' \
  'if b.off {' \
  . '^(TestBatchSendsDeadlineScriptsAlone)$'
# The reach gate opens through the pool's working connections when a
# fresh dial fails (Sentinels or DNS down, a DialHook).
m "reach: gate opens only on a fresh dial" reach.go \
  'if r.idle() || time.Since(r.pinged) >= time.Second {' \
  'if false {' \
  . '^(TestGateOpensOnWorkingPool)$'
# Lock waits out an outage as long as its ctx allows.
m "reach: Lock fails at once on a shut gate" acquire.go \
  'case errors.Is(err, ErrUnreachable) && !try && h.gate().wait(ctx):' \
  'case false:' \
  . '^(TestLockWaitsOutOutage)$'
# A RedLock's servers are Clients with gates of their own.
m "reach: RedLock follows its first Client's gate" lock.go \
  'if _, ok := h.kind.(*redKind); ok {
		return ungated
	}
	return h.c.reach' \
  'return h.c.reach' \
  . '^(TestRedLockIgnoresFirstClientGate)$'

# --- hand-over and same-Client waiters ---

# --- synchronizers: Semaphore, PermitSemaphore, CountDownLatch ---

# --- read-write and fair locks ---

# --- batcher, holder records, observer, CLI ---

# copy makes a scratch copy of the working tree (without .git) in $1.
copy() {
  mkdir -p "$1"
  (cd "$root" && tar --exclude=./.git -cf - .) | tar -xf - -C "$1"
}

# runtests runs the tests of $2 matching $3 in the tree $1; it succeeds
# when they all pass. The output goes to $4.
runtests() {
  (cd "$1" && $GO test -count=1 -timeout 10m -v -run "$3" "$2") >"$4" 2>&1
}

# ran reports whether the go test output $1 shows a test that ran at the
# depth of the pattern $2 (a subtest for a pattern with a slash).
ran() {
  local slashes=${2//[^\/]/}
  grep -E -- '--- (PASS|FAIL|SKIP): ' "$1" | awk -v d=${#slashes} '{ n = gsub("/", "/", $3); if (n >= d) found = 1 } END { exit !found }'
}

# failed lists the tests that failed in a go test output.
failed() {
  grep -oE -- '--- FAIL: [^ ]+' "$1" | sed 's/--- FAIL: //' | sort -u | head -6 | paste -sd, -
}

status=0
# Baseline: the tests named above must pass on the unmutated tree, or a
# failure under a mutation says nothing.
declare -A base=()
for k in "${!m_name[@]}"; do
  [[ -z $filter || ${m_name[k]} == *$filter* ]] || continue
  base[${m_pkg[k]}]+="${base[${m_pkg[k]}]:+ }${m_tests[k]}"
done
copy "$work/base"
for pkg in "${!base[@]}"; do
  for pattern in ${base[$pkg]}; do
    echo "baseline: $pkg $pattern"
    if ! runtests "$work/base" "$pkg" "$pattern" "$work/base.out" || ! ran "$work/base.out" "$pattern"; then
      echo "baseline: the tests fail, or none ran, on the unmutated tree:"
      tail -40 "$work/base.out"
      exit 1
    fi
  done
done
rm -rf "$work/base"

rows=()
i=0
for k in "${!m_name[@]}"; do
  name=${m_name[k]} file=${m_file[k]} from=${m_from[k]} to=${m_to[k]} pkg=${m_pkg[k]} tests=${m_tests[k]}
  [[ -z $filter || $name == *$filter* ]] || continue
  i=$((i + 1))
  dir="$work/m$i"
  copy "$dir"
  n=$(FROM="$from" perl -0ne 'BEGIN{$n=0} $n += () = /\Q$ENV{FROM}\E/g; END{print $n}' "$dir/$file")
  if [[ $n != 1 ]]; then
    rows+=("| $name | \`$file\` | $tests | NOT APPLIED (found $n times) |")
    status=1
    rm -rf "$dir"
    continue
  fi
  FROM="$from" TO="$to" perl -0pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$dir/$file"
  echo "mutation $i: $name ($file) -> go test -run '$tests' $pkg"
  start=$SECONDS
  if runtests "$dir" "$pkg" "$tests" "$dir.out" && ! ran "$dir.out" "$tests"; then
    rows+=("| $name | \`$file\` | \`$tests\` | NO TEST RAN (fix the list) |")
    status=1
  elif runtests_ok=$(grep -c -- '--- FAIL' "$dir.out"); [[ $runtests_ok == 0 ]] && ! grep -q '^FAIL' "$dir.out"; then
    rows+=("| $name | \`$file\` | \`$tests\` | **SURVIVED** |")
    status=1
  elif grep -q -- '--- FAIL' "$dir.out"; then
    rows+=("| $name | \`$file\` | $tests | caught by $(failed "$dir.out") ($((SECONDS - start)) s) |")
  elif grep -q '^panic: ' "$dir.out"; then
    rows+=("| $name | \`$file\` | $tests | caught: $(grep -m1 '^panic: ' "$dir.out" | cut -c1-60) ($((SECONDS - start)) s) |")
  else
    # A build failure is no catch: the mutation must compile.
    rows+=("| $name | \`$file\` | $tests | BROKEN (no test failed: $(grep -m1 -vE '^(FAIL|ok|#)' "$dir.out" | cut -c1-80)) |")
    status=1
  fi
  rm -rf "$dir" "$dir.out"
done

echo
echo "| mutation | file | tests that must catch it | result |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $status
