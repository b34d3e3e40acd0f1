#!/usr/bin/env bash
# mutate.sh: deliberate breakages of dlock, each applied to a scratch copy
# of the working tree, with the tests that must catch it. A mutation
# survives when its tests still pass: the table printed at the end says
# which test caught each one, and the script exits 1 if any survived, any
# could not be applied (the code it edits changed: update the list), any
# does not compile, or the tests fail on the unmutated tree.
#
#   scripts/mutate.sh               # every mutation (make mutate)
#   scripts/mutate.sh fence         # the mutations whose name contains "fence"
#   scripts/mutate.sh --base main   # the mutations whose file changed since
#                                   # main, committed or not (make mutate BASE=main)
#   scripts/mutate.sh --check       # only check that every mutation applies
#
# Each mutation is one literal text replacement in one file, which must
# match exactly once, and names a package and a go test -run pattern. Its
# package's test binary is built once with the mutation applied and runs
# only those tests. MUTATE_JOBS (default 4) mutations run at a time, at
# most MUTATE_BUILDS (default: the number of CPUs) of them compiling, each
# slot on a copy of the tree of its own that it reuses, so that go's build
# cache spares what a mutation leaves unchanged; the copies live under
# $MUTATE_DIR (default: a fresh temporary directory) and are removed at
# the end.
set -uo pipefail
# The braces make bash read the whole script before it runs any of it, so
# that an edit of this file during a run cannot change the run.
{

root=$(cd "$(dirname "$0")/.." && pwd)
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
# A Lock whose ctx has ended sends nothing: an attempt handed to another
# goroutine could have its reply first and take the lock for a caller that
# gave up.
m "acquire: a Lock with an ended ctx still attempts" acquire.go \
  '	if ctxDone(ctx) {
		// Nothing is sent' \
  '	if false {
		// Nothing is sent' \
  . '^(TestLockWithEndedCtxMakesNoAttempt)$'
# Every hold ends locally before its lease can run out in Redis: the
# lease starts there after the request was sent, and the lock context's
# timer fires late under load (verify/ saw holders writing after the next
# owner was granted the lock).
m "validity: no allowance on a single server" kind.go \
  'return lease - drift(lease)' \
  'return lease' \
  . '^(TestLocalDeadlineBeforeExpiry)$'
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
# A spin waiter sleeps one backoff step at most (1 ms doubling to
# 128 ms), not until the holder's lease: nothing will wake it.
m "spin: waiter sleeps to the lease, not its backoff" wait.go \
  'd = min(d, w.spin.step())' \
  'd = max(d, w.spin.step())' \
  . '^(TestSpinLockNoPubSub|TestSpinLockRedissonInterop)$'
# The backoff is capped (Redisson's maxDelay).
m "spin: backoff not capped" spin.go \
  'b.next = min(2*b.next+time.Duration(rand.IntN(b.fails))*time.Millisecond, b.most)' \
  'b.next = 2*b.next + time.Duration(rand.IntN(b.fails))*time.Millisecond' \
  . '^(TestSpinBackoff)$'
# A spin lock's unlock publishes nothing, so it wakes this Client's own
# waiters of other kinds on the name (a Mutex's) to try again.
m "spin: release wakes no waiter of this Client" release.go \
  'h.c.queues.wakeFirst(h.queueKey())' \
  '_ = h.queueKey()' \
  . '^(TestSpinUnlockWakesMutexWaiterHere)$'
# A spin lock's unlock publishes nothing (Redisson's RSpinLock).
m "spin: release publishes" internal/scripts/spin_release.lua \
  "end
return 1" \
  "end
redis.call('publish', 'redisson_lock__channel:{' .. KEYS[1] .. '}', 0)
return 1" \
  . '^(TestSpinLockNoPubSub)$'
# WithoutReentry refuses a re-entry by the holder's own lock context.
m "no-reentry: a re-entry is let in" acquire.go \
  'if h.cfg.noReentry {' \
  'if false && h.cfg.noReentry {' \
  . '^(TestContract|TestNonReentrantRedissonInterop)$'
# A reply that comes after the lease it set ran out is not a hold.
m "late-reply check disabled" acquire.go \
  'case res.acquired && time.Since(start) >= validity(req.lease):' \
  'case false && res.acquired && time.Since(start) >= validity(req.lease):' \
  . '^(TestLateReplyIsNotAHold)$'
# With a client that ends requests at their deadline, an attempt with a
# deadline runs on the caller's goroutine, with the caller's ctx.
m "attempt with a deadline handed to a goroutine" send.go \
  'return ctx.Done() == nil || h.c.deadlines && hasDeadline(ctx)' \
  'return ctx.Done() == nil' \
  . '^(TestAttemptOnCallersContext)$'
# The first acquisition's short path (lock_acquire_free.lua) must check
# that the lock is free, and a fenced one must take a new token.
m "free path grants a held lock" internal/scripts/lock_acquire_free.lua \
  "and redis.call('exists', KEYS[1]) == 0 then" \
  "then" \
  . '^(TestSharedHandleExcludes|TestMutualExclusion)$'
m "free path takes no token" internal/scripts/lock_acquire_free.lua \
  "return {1, redis.call('incrby', KEYS[2], floor - current)}" \
  "return {1, 1}" \
  . '^(TestFencingTokens)$'
# Tokens never go back across a failover that lost the counter's last
# increments: the server's clock is their floor, on the free path and in
# fence.lua (the fair lock and both halves of the RW lock).
m "token floor dropped (free path)" internal/scripts/lock_acquire_free.lua \
  "  if current < floor then
    return {1, redis.call('incrby', KEYS[2], floor - current)}" \
  "  if false then
    return {1, redis.call('incrby', KEYS[2], floor - current)}" \
  . '^(TestTokensSurviveLostWrites)$'
m "token floor dropped (fence)" internal/scripts/fence.lua \
  "  if current < floor then
    return redis.call('incrby', counter, floor - current)" \
  "  if false then
    return redis.call('incrby', counter, floor - current)" \
  . '^(TestTokensSurviveLostWrites)$'
# The counter must keep the last token, so that Redisson's FencedLock,
# which INCRs it, goes on above it.
m "counter does not keep the token" internal/scripts/lock_acquire_free.lua \
  "return {1, redis.call('incrby', KEYS[2], floor - current)}" \
  "redis.call('incr', KEYS[2])
    return {1, floor}" \
  . '^(TestRedissonFencedLockTokens)$'
# The storage checks: the Redis fenced write refuses a lower token, and
# an equal one from another holder (two grants of one token in a split
# brain), and lets the same holder write again; the SQL check's upsert
# changes the row by the same rule, and a refused check is reported
# (tested against a real PostgreSQL, fencetest/). FenceOf carries the
# lock's owner as the holder.
m "fenced write ignores the token" internal/scripts/fenced_write.lua \
  "if token < last or (token == last and holder ~= ARGV[2]) then" \
  "if false then" \
  . '^(TestFencedSet|TestFencedWriteRejectsPausedHolder)$'
m "fenced write refuses an equal token" internal/scripts/fenced_write.lua \
  "if token < last or (token == last and holder ~= ARGV[2]) then" \
  "if token <= last then" \
  . '^(TestFencedSet)$'
m "fenced write takes an equal token from another holder" internal/scripts/fenced_write.lua \
  "if token < last or (token == last and holder ~= ARGV[2]) then" \
  "if token < last then" \
  . '^(TestFencedSetEqualToken)$'
m "FenceOf without the lock's owner" hold.go \
  "return Fence{Token: a.token, Holder: hd.owner}" \
  'return Fence{Token: a.token, Holder: "holder"}' \
  . '^(TestFenceOf)$'
m "fenced write raises the fence before the data" internal/scripts/fenced_write.lua \
  "end
if ARGV[3] == 'set' then" \
  "end
redis.call('set', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
if ARGV[3] == 'set' then" \
  . '^(TestFencedHSetFails)$'
m "fenced write unpacks every field at once" internal/scripts/fenced_write.lua \
  "unpack(ARGV, i, math.min(i + 999, #ARGV))" \
  "unpack(ARGV, i)" \
  . '^(TestFencedHSetManyFields)$'
m "fenced write takes tokens above 2^53" fence.go \
  'if token > maxFenceToken {' \
  'if false {' \
  . '^(TestFencedWriteInput)$'
m "SQL fence check always updates" fence.go \
  '"WHERE f.token < EXCLUDED.token OR (f.token = EXCLUDED.token AND f.holder = EXCLUDED.holder)"' \
  '"WHERE true"' \
  ./fencetest '^(TestCheckTokenRejectsStale|TestPausedHolderRejectedByPostgres)$'
m "SQL fence check ignores a refused upsert" fence.go \
  'if n == 0 {' \
  'if n < 0 {' \
  ./fencetest '^(TestCheckTokenRejectsStale)$'
m "SQL fence check takes an equal token from another holder" fence.go \
  'OR (f.token = EXCLUDED.token AND f.holder = EXCLUDED.holder)"' \
  'OR f.token = EXCLUDED.token"' \
  ./fencetest '^(TestCheckTokenEqualToken)$'
# Create takes no lock on a table that has the holder column (ALTER TABLE
# would wait for open Check transactions, and new Checks behind it), and
# waits for the lock at most its lock_timeout where it must add it.
m "SQL fence Create alters a table that has the holder column" fence.go \
  'IF NOT EXISTS (SELECT 1 FROM pg_attribute' \
  'IF true OR NOT EXISTS (SELECT 1 FROM pg_attribute' \
  ./fencetest '^(TestCreateWhileCheckOpen)$'
m "SQL fence Create waits for the table lock unbounded" fence.go \
  'const fenceAlterLockTimeout = "2s"' \
  'const fenceAlterLockTimeout = "0"' \
  ./fencetest '^(TestCreateAddsHolderBounded)$'
# The acquire script grants the lock whoever holds it.
m "acquire grants unconditionally" internal/scripts/lock_acquire.lua \
  "else
  return {0, redis.call('pttl', KEYS[1])}" \
  "else
  redis.call('hset', KEYS[1], ARGV[2], 1)" \
  . '^(TestSharedHandleExcludes|TestMutualExclusion)$'
# The confirmation of a resubscription after a reconnect must wake every
# waiter: unlock messages sent while the connection was down are lost.
# The hub is every kind's: one kind on one server shows it in 17 s, where
# every kind on every deployment took 157 s.
m "no wake-up on resubscription" internal/pubsub/hub.go \
  'if !ours || ch.moved {' \
  'if false {' \
  . '^TestContract$/^Single$/^Mutex$/^MissedNotice$'

m "no wake-up on resubscription (chaos)" internal/pubsub/hub.go \
  'if !ours || ch.moved {' \
  'if false {' \
  ./internal/chaos '^(TestPubSubKills)$'
# Fencing tokens must go up with every acquisition.
m "fencing token not incremented" internal/scripts/fence.lua \
  "  return nextToken(counter)" \
  "return tonumber(redis.call('get', counter) or '0')" \
  . '^(TestFencingTokens)$'
# The watchdog tells a holder at its next renewal that the lock is gone,
# not only when the local lease deadline passes.
m "watchdog does not report a lost lock" renew.go \
  'hd.lose(fmt.Errorf("%w: %q: the watchdog found it released' \
  '_ = fmt.Sprint(fmt.Errorf("%w: %q: the watchdog found it released' \
  . '^(TestLostWhenDeleted)$'
# Past capacity a tick starts with the entries renewed longest ago, so
# that every entry is renewed in turn.
m "watchdog: past capacity, not oldest first" internal/watchdog/watchdog.go \
  'return cmp.Compare(a.at, b.at)' \
  'return cmp.Compare(b.at, a.at)' \
  ./internal/watchdog '^(TestPastCapacityRenewsInTurnAndReportsLag)$'
# A tick that fell behind is reported: RenewalLag and a log line.
m "renewal lag not reported" client.go \
  '	c.watchdog.ReportLag(c.renewalLag)' \
  '	c.watchdog.ReportLag(func(watchdog.Lag) {})' \
  . '^(TestRenewalsPastCapacity)$'
# The deadline queue finds a renewed hold's deadline moved and queues it
# again, rather than losing it at the deadline it was queued at.
m "deadline queue: a renewed hold lost at its first deadline" expiry.go \
  'if hd.until.get() > at {' \
  'if false && hd.until.get() > at {' \
  . '^(TestWatchdogKeepsLock)$'
# Per held lock the Client keeps no channel: the op channel and the lock
# context's cancellation are made when first needed (issue 23: a million
# held locks in 800 B each).
m "hold heap: op channel made with every hold" hold.go \
  'watchdog: !h.cfg.hasLease, slot: -1}' \
  'watchdog: !h.cfg.hasLease, slot: -1, op: make(chan struct{}, 1)}' \
  . '^(TestHoldHeap)$'
m "hold heap: lock context cancellation made with every lock" hold.go \
  'acq := &acquisition{parent: ctx, token: token, fenced: req.fence}' \
  'acq := &acquisition{parent: ctx, token: token, fenced: req.fence}; acq.cancellation()' \
  . '^(TestHoldHeap)$'
# A lock context's cause reaches context.Cause and derived contexts
# through the cancellation made on demand (package context asks with a
# *int key).
m "lazy lock context: context.Cause without the cause" hold.go \
  '	case *int:
		a.overdue()
		return a.cancellation().Value(key)' \
  '	case *float64:
		a.overdue()
		return a.cancellation().Value(key)' \
  . '^(TestLockContextCause)$'
# A lock context that ended before its cancellation was made is made
# cancelled.
m "lazy lock context: an end before Done lost" hold.go \
  '		if a.cause != nil {
			cancel(a.cause)
		}' \
  '' \
  . '^(TestLockContextCause)$'
# The holder of a lock and role is the newest hold; none once dropped.
m "registry: holder flag kept by an older hold" hold.go \
  '			o.holder = false' \
  '			o.holder = o.holder' \
  . '^(TestRegistryChain)$'
m "registry: a hold in the middle of a chain stays after it is dropped" hold.go \
  '				p.next = hd.next' \
  '				p.next = p.next' \
  . '^(TestRegistryChain)$'
# A release that fails while Redis restarts is sent again in the
# background, and so is the give-back of an attempt whose reply was lost:
# otherwise the lock stays taken for its lease. (The chaos scenario
# TestRedisRestart catches these too, but only when a kill meets an
# Unlock or a reply in flight: not on every run.)
m "failed release not retried" release.go \
  '	if !retrying(err) {' \
  '	if true || !retrying(err) {' \
  . '^(TestReleaseOutlivesOutage)$'
m "failed give-back not retried" background.go \
  'if _, err := h.sendUntil(ctx, until, nil, send); err != nil {' \
  'if err := send(ctx); err != nil {' \
  . '^(TestGiveBackOutlivesOutage)$'
# While a release is retried in the background, a Lock by the same owner
# waits for it: a lock it took meanwhile would be deleted by that release.
m "same owner does not wait for its release" acquire.go \
  'return nil, h.c.work.awaitIdle(ctx, h.holdKey(req.owner))' \
  'return nil, nil' \
  . '^(TestSameOwnerWaitsForRetriedRelease)$'
# A Client hands a lock to its own waiters at most handoffBound times in a
# row while another process waits for it.
m "hand-over not bounded" handoff.go \
  'if q.handoffs < bound {' \
  'if true {' \
  . '^(TestHandoffBoundLetsOthersIn|TestHandoffBoundExact)$'
# A batched script goes out with a pipeline that go-redis writes again
# after a lost reply; a queued caller whose ctx ends leaves the queue.
m "batch: queued caller ignores its ctx" internal/transport/batch.go \
  'if b.withdraw(q) {' \
  'if false && b.withdraw(q) {' \
  . '^(TestBatchedScriptGivenUp)$'
# On a cluster one frozen master would hold up every batch.
m "batch: cluster scripts batched" internal/transport/transport.go \
  'batcher{rdb: rdb, off: cluster, deadlines: cfg.Deadlines,' \
  'batcher{rdb: rdb, off: cluster && false, deadlines: cfg.Deadlines,' \
  . '^(TestClusterFrozenMasterHoldsUpNoOther)$'
# With ContextTimeoutEnabled a script with a deadline is sent alone: in a
# batch it would run under the batch's latest deadline, or none.
m "batch: deadline scripts batched" internal/transport/batch.go \
  'b.off || b.deadlines && deadline {' \
  'b.off || b.deadlines && deadline && false {' \
  . '^(TestBatchSendsDeadlineScriptsAlone)$'
# The reach gate opens through the pool's working connections when a
# fresh dial fails (Sentinels or DNS down, a DialHook).
m "reach: gate opens only on a fresh dial" internal/transport/reach.go \
  'if r.idle() || time.Since(r.pinged) >= time.Second {' \
  'if false {' \
  . '^(TestGateOpensOnWorkingPool)$'
# Lock waits out an outage as long as its ctx allows.
m "reach: Lock fails at once on a shut gate" acquire.go \
  'case errors.Is(err, ErrUnreachable) && !try && c.gate().Wait(ctx):' \
  'case false:' \
  . '^(TestLockWaitsOutOutage)$'
# A RedLock's servers are Clients with gates of their own.
m "reach: RedLock follows its first Client's gate" kind.go \
  'if _, ok := k.(selfGated); ok {' \
  'if _, ok := k.(selfGated); false && ok {' \
  . '^(TestRedLockIgnoresFirstClientGate)$'
# The synchronizers run behind the same gate: once Redis is found
# unreachable their calls fail at once, without dialling.
m "synchronizer ignores the reach gate" internal/transport/transport.go \
  'if err := t.gate.Err(); err != nil {' \
  'if err := t.gate.Err(); false && err != nil {' \
  . '^(TestSynchronizerUnreachableFailsAtOnce)$'
# A script that must run at most once is not re-sent, but a failed dial
# sent nothing: it shuts the gate and ends the tries, rather than dialling
# again for the whole retry budget.
# A waiting Acquire waits out an outage at the gate, as Lock does.
m "sync: waiting Acquire fails at once in an outage" acquire.go \
  'case errors.Is(err, ErrUnreachable) && !try && c.gate().Wait(ctx):' \
  'case false:' \
  . '^(TestSynchronizerAcquireWaitsOutOutage)$'
# A waiting PermitSemaphore Acquire waits at the gate too (the loop's, as
# Lock does), rather than retrying (and logging) every 100 ms through the
# outage.
m "sync: waiting permit Acquire retries through an outage" acquire.go \
  'case errors.Is(err, ErrUnreachable) && !try && c.gate().Wait(ctx):' \
  'case false:' \
  . '^(TestSynchronizerAcquireWaitsOutOutage)$'
# An Acquire whose ctx ends at the gate reports ErrNotObtained and ctx's
# error, not the outage.
m "sync: ctx ended at the gate reported as the outage" semaphore.go \
  'if errors.Is(err, errGaveUp) || errors.Is(err, ErrUnreachable) && ctxErr(ctx) != nil {' \
  'if errors.Is(err, errGaveUp) {' \
  . '^(TestSynchronizerAcquireWaitsOutOutage)$'
# A re-entry goes to Redis at once, not behind its Client's waiters.
m "hand-over: re-entry waits behind the Client's waiters" handoff.go \
  '	if h.c.holds.held(h.holdKey(owner)) != nil {' \
  '	if false && h.c.holds.held(h.holdKey(owner)) != nil {' \
  . '^(TestReentryNotHeldUpByWaiters)$'
# Permit renewals are reported to observers as lock renewals are.
m "observer: permit renewals not reported" renew.go \
  '	c.observeRenewal(len(permits), start, alive, nil)' \
  '	_ = alive' \
  . '^(TestObserverPermitRenewal)$'
m "transport: once-script dials on through an outage" internal/transport/transport.go \
  '		if NotSent(err) {
			if gerr' \
  '		if NotSent(err) && false {
			if gerr' \
  . '^(TestSynchronizerUnreachableFailsAtOnce)$'
# With WithReplicaSync a synchronizer's write waits for the replicas: an
# acquire too few acknowledged is given back (a failover would grant the
# permit twice).
m "synchronizer write skips replica sync" synchronizer.go \
  'if c.drv.Synced() {' \
  'if false && c.drv.Synced() {' \
  . '^(TestSynchronizerReplicaSyncNoReplica)$'
# Run reports a script go-redis sent twice, so that a release's -1 is read
# as the answer to the repeat.
m "transport: re-sent script not reported" internal/transport/transport.go \
  'resent = resent || sends.n.Load() > 1' \
  'resent = resent && sends.n.Load() > 1' \
  . '^(TestLostReplyIsNotAppliedTwice)$'

# --- hand-over and same-Client waiters ---
# A waiting Lock whose ctx ended leaves its Client's queue: else the next
# Unlock hands the lock to its owner, held unseen for the whole lease.
m "hand-over: waiter whose ctx ended stays queued" wait.go \
  'if !g.ok && !g.freed && w.place != nil {' \
  'if !g.ok && !g.freed && w.place != nil && ctx.Err() == nil {' \
  . '^(TestCancelledWaiterLeavesQueue)$'
# Exactly handoffBound hand-overs in a row while another process waits,
# then a free: neither one more nor one fewer.
m "hand-over: bound off by one (<=)" handoff.go \
  'if q.handoffs < bound {' \
  'if q.handoffs <= bound {' \
  . '^(TestHandoffBoundExact|TestHandOverMinimalACL)$'
m "hand-over: bound one short" handoff.go \
  'if q.handoffs < bound {' \
  'if q.handoffs < bound-1 {' \
  . '^(TestHandoffBoundExact|TestHandOverMinimalACL)$'
# The count starts again after a free: else, once over the bound, a busy
# Client frees the lock at every release while others wait.
m "hand-over: counter not reset by a free" handoff.go \
  'q.handoffs = 0' \
  '_ = q' \
  . '^(TestHandoffBoundExact)$'
# A release that frees instead of handing over publishes, or the other
# process's waiter (and the chosen one) sleep until the lease ends.
m "hand-over: free not published" internal/scripts/lock_release_to.lua \
  'redis.call(ARGV[3], KEYS[2], ARGV[1])
return {1, 0}' \
  'return {1, 0}' \
  . '^(TestHandoffBoundExact|TestFreedWaiterNotStranded)$'
# A handed-over lock takes a new fencing token, and the waiter gets it.
m "hand-over: script takes no token" internal/scripts/lock_release_to.lua \
  "{2, fence(KEYS[3], ARGV[6], false)}" \
  "{2, tonumber(redis.call('get', KEYS[3]) or '0')}" \
  . '^(TestHandoffBoundExact)$'
m "hand-over: waiter's token dropped" release.go \
  'token: ho.token, start: start})' \
  'token: 0, start: start})' \
  . '^(TestHandoffBoundExact|TestHandedLockLease)$'
# A handed lock's lease counts from the release that handed it.
m "hand-over: lease counted from the releasing holder's start" release.go \
  'start := time.Now()' \
  'start := hd.until.get().time().Add(-hd.valid())' \
  . '^(TestHandedLockLease)$'
# The waiter a free chose, woken by the unlock message before it was told
# of the free, tries at once: the message is used up, the lock free.
m "hand-over: freed waiter waits again after its wake-up" wait.go \
  'woken || ctxDone(ctx)' \
  'woken && false || ctxDone(ctx)' \
  . '^(TestFreedWaiterNotStranded|TestHandOverMinimalACL)$'
# Past the bound the script asks PUBSUB NUMSUB whether another process
# waits, counting this Client's own subscription as one.
m "hand-over: script does not ask NUMSUB" internal/scripts/lock_release_to.lua \
  "local subs = redis.pcall('pubsub', ARGV[7], KEYS[2])" \
  "local subs = {'', 0}" \
  . '^(TestHandoffBoundExact|TestHandOverMinimalACL)$'
m "hand-over: own subscription not counted as ours" release.go \
  'when, 1)' \
  'when, 0)' \
  . '^(TestHandOverMinimalACL)$'

# --- synchronizers: Semaphore, PermitSemaphore, CountDownLatch ---
# A permit waiter is told when the earliest held permit expires and tries
# again then, not at its 1 s poll: an expiry publishes nothing.
m "permits: acquire does not tell when the next permit expires" internal/scripts/psem_acquire.lua \
  "return ':' .. tostring(math.max(tonumber(v[2]) - now, 0))" \
  "return nil" \
  . '^(TestPermitSemaphoreFixedLease)$'
# A release wakes the waiters of other Clients by its message, at once,
# not at their 1 s poll.
m "sem: release does not publish" internal/scripts/sem_release.lua \
  "redis.call(ARGV[2], KEYS[2], value)
return value" \
  "return value" \
  . '^(TestSemaphoreWaitAndClose)$'
# So does AddPermits.
m "sem: add permits does not publish" internal/scripts/sem_add.lua \
  "redis.call(ARGV[2], KEYS[2], value)
return value" \
  "return value" \
  . '^(TestSemaphoreSetAndAddWake)$'
# TrySetPermits sets a semaphore only if it has not been set.
m "sem: try-set overwrites the permits" internal/scripts/sem_try_set.lua \
  "if redis.call('exists', KEYS[1]) == 0 then" \
  "if true then" \
  . '^(TestSemaphoreOperations)$'
# TrySetPermits wakes the waiters by its message, as AddPermits does.
m "sem: try-set does not publish" internal/scripts/sem_try_set.lua \
  "  redis.call(ARGV[2], KEYS[2], ARGV[1])
" \
  "" \
  . '^(TestSemaphoreSetAndAddWake)$'
# TrySetPermitsWithTTL sets the time to live with the permits.
m "sem: try-set with ttl sets no ttl" internal/scripts/sem_try_set_ttl.lua \
  "redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])" \
  "redis.call('set', KEYS[1], ARGV[1])" \
  . '^(TestSemaphoreTTL|TestSemaphoreParityRedissonInterop)$'
# ReleaseIfExists does not bring back a deleted or expired semaphore.
m "sem: release-if-exists creates the semaphore" internal/scripts/sem_release_if_exists.lua \
  "if redis.call('exists', KEYS[1]) == 0 then
  return 0
end" \
  "" \
  . '^(TestSemaphoreTTL|TestSemaphoreParityRedissonInterop)$'
# Redisson's zero rule: TryAcquire(0) succeeds without a command.
m "sem: zero permits not taken" semaphore.go \
  'return true, nil // Redisson: nothing to take' \
  'return false, nil // Redisson: nothing to take' \
  . '^(TestSemaphoreZeroPermits)$'
# A permit's release wakes the waiters by its message, not their poll.
m "permits: release does not publish" internal/scripts/psem_release.lua \
  "redis.call(ARGV[2], KEYS[3], value)
" \
  "" \
  . '^(TestPermitSemaphoreReleaseWakes)$'
# A release of a Client whose own waiters wait hands the permit to the
# longest one, in order, without a message (psem_release_to.lua).
m "permits: release never hands over" internal/scripts/psem_release_to.lua \
  "local hand = not handed and ARGV[6] == 'always'" \
  "local hand = false" \
  . '^(TestPermitSemaphoreHandOver)$'
# At most permitHandoffBound hand-overs in a row while another process
# (Java) waits; then the release frees the permit and publishes.
m "permits: hand-over not bounded" permit_semaphore.go \
  'const permitHandoffBound = 8' \
  'const permitHandoffBound = 1 << 30' \
  . '^(TestPermitSemaphoreHandOverJavaTurn)$'
# No hand-over while SetPermits has the pool below zero: it needs the
# permit, or more would be held than the total.
m "permits: hand-over below zero available" internal/scripts/psem_release_to.lua \
  "if hand and tonumber(redis.call('get', KEYS[1]) or '0') >= 0 then" \
  "if hand then" \
  . '^(TestPermitSemaphoreNoHandOverBelowZero)$'
# A waiter's place takes the permit id of its latest sleep: a hand-over
# to an earlier id leaves the waiter a permit context Redis does not have.
m "permits: waiter's place keeps its first permit id" wait.go \
  '			w.place.req = w.req
' \
  '' \
  . '^(TestPermitSemaphoreHandOverAfterRetry)$'
# A counting waiter that took its permit passes on a wake-up that came
# meanwhile (a message for another permit freed): dropped, the next waiter
# of the Client sleeps to its poll while a permit is free.
m "permits: waiter that took its permit drops a wake-up" wait.go \
  '	case w.counts:
		w.sleeper.stop(false)' \
  '	case w.counts:
		w.sleeper.stop(true)' \
  . '^(TestPermitCountedWakePassedOn)$'
# A Lock that subscribes before its first attempt waits for the
# confirmation a bounded time: unbounded, a subscription Redis refuses
# keeps a fair Lock from ever trying a free lock.
m "fair: early subscribe waits unbounded for its confirmation" wait.go \
  'unconfirmed := time.NewTimer(earlyConfirm)' \
  'unconfirmed := time.NewTimer(time.Hour)' \
  . '^(TestFairSubscriptionRefusedFreeLock)$'
# A sleeping waiter is handed a permit under an id of its own, never one
# of its attempts' (which a failed attempt may hold, and give back).
m "permits: hand-over to the latest attempt's id" wait.go \
  '	w.req.owner = owner
	return nil' \
  '	_ = owner
	return nil' \
  . '^(TestPermitSemaphoreHandOverFreshID)$'
# A release to an id that holds a permit already frees the releaser's
# permit: answered "handed", it would stay held by nobody.
m "permits: release to a held id keeps the releaser's permit" internal/scripts/psem_release_to.lua \
  "local handed = redis.call('zscore', KEYS[2], ARGV[4]) ~= false" \
  "local handed = redis.call('zscore', KEYS[2], ARGV[4]) ~= false
if handed then return {2, 0} end" \
  . '^(TestPermitReleaseToHeldID)$'
# A permit without lease (NoPermitLease) gets Redisson's no-expiry score,
# never an expiry.
m "permits: a permit without lease gets an expiry" permit_semaphore.go \
  'if lease >= foreverLease {' \
  'if false {' \
  . '^(TestPermitSemaphoreNoLease)$'
# A permit taken with a lease of its own call is kept with that lease.
m "permits: a per-call lease is not kept with its lease" permit_semaphore.go \
  'h.kind = psemKind{s: s, lease: lease}' \
  'h.kind = psemKind{s: s, lease: s.lease}' \
  . '^(TestPermitSemaphoreLeasePerCall)$'
# LeaseTime reads Redisson's no-expiry score as a permit without lease.
m "permits: lease time of a permit without lease read as a date" internal/scripts/psem_lease_time.lua \
  "if score == '922337203685477' then
  return -1
end" \
  "" \
  . '^(TestPermitSemaphoreLeaseTime)$'
# A message "n" on a semaphore's channel wakes n of a Client's permit
# waiters, not all of them.
m "permits: a message wakes every counting waiter" internal/pubsub/hub.go \
  'if w.counts && n == 0 {' \
  'if false {' \
  ./internal/pubsub '^(TestCountedWake)$'
# Every permit script first returns expired permits to the pool: a dead
# holder's permit comes back one lease after it died.
m "permits: reclaim frees no expired permit" internal/scripts/psem_reclaim.lua \
  "if #expired > 0 then" \
  "if false then" \
  . '^(TestPermitSemaphoreWatchdog)$'
# The release of a permit that expired, not yet reclaimed, fails with
# ErrNotHeld (Java's release throws), though the permit goes back.
m "permits: release of an expired permit succeeds" permit_semaphore.go \
  'return released, n == 2, nil' \
  'return released, false, nil' \
  . '^(TestPermitSemaphoreReleaseExpired)$'
# TotalPermits is Redisson's getPermits: available plus held.
m "permits: total permits leaves out those held" internal/scripts/psem_count.lua \
  "return {tonumber(value), acquired, tonumber(value) + acquired}" \
  "return {tonumber(value), acquired, tonumber(value)}" \
  . '^(TestPermitSemaphoreTotalPermits)$'
# UpdateLeaseByID sets the lease it is given on the permit of that id.
m "permits: lease by id only checks the permit" permit_semaphore.go \
  's.c.publish, leaseArg(lease), string(raw)).Int64Slice()' \
  's.c.publish, int64(0), string(raw)).Int64Slice()' \
  . '^(TestPermitSemaphoreUpdateLeaseByID)$'
# TryAcquireN takes n permits or none (Redisson's tryAcquire(n)).
m "permits: acquire of n takes them with one available" internal/scripts/psem_acquire_n.lua \
  "if value ~= false and tonumber(value) >= n then" \
  "if value ~= false and tonumber(value) >= 1 then" \
  . '^(TestPermitSemaphoreManyPermits)$'
# AcquireN waits on the semaphore's channel: a release wakes it at once.
m "permits: AcquireN deaf to the channel" permit_semaphore.go \
  'newSyncWait(s.c, s.channel, nil, ob,' \
  'newSyncWait(s.c, s.channel+"-deaf", nil, ob,' \
  . '^(TestPermitSemaphoreAcquireN)$'
# ReleaseIDs gives back a list all together or none (Redisson 3.41.0).
m "permits: release of a list is not all-or-nothing" internal/scripts/psem_release_ids.lua \
  "    return 0
  end
  ids[#ids + 1] = ARGV[i]" \
  "  end
  ids[#ids + 1] = ARGV[i]" \
  . '^(TestPermitSemaphoreManyPermits)$'
# The Client's one watchdog, which renews its locks, renews a live
# holder's permits before their lease runs out.
m "permits: watchdog does not renew permits" renew.go \
  "	return p.s.c.renewPermits(ctx, entries[*permit](chunk))" \
  "	return nil" \
  . '^(TestPermitSemaphoreWatchdog|TestPermitSemaphoreSharedWatchdog)$'
# The renewal that finds a permit gone (released by id, deleted) cancels
# its context at once, not when the local lease runs out.
m "permits: renewal does not report a lost permit" renew.go \
  'p.drop(fmt.Errorf("%w: semaphore %q: the permit was reclaimed or deleted", ErrLockLost, s.name))' \
  '_ = fmt.Errorf("%w: semaphore %q: the permit was reclaimed or deleted", ErrLockLost, s.name)' \
  . '^(TestPermitSemaphoreRenewalFindsLoss|TestPermitSemaphoreFixedLeaseLossNoticed)$'
# The watchdog checks a permit with a fixed lease, as it checks a lock's
# fixed-lease hold: its loss is noticed within an interval.
m "permits: watchdog does not check fixed-lease permits" renew.go \
  "	return c.leasePermits(ctx, 0, fixed)" \
  "	return nil" \
  . '^(TestPermitSemaphoreFixedLeaseLossNoticed)$'
# ... and only checks it: a fixed lease is not renewed.
m "permits: watchdog renews fixed-lease permits" renew.go \
  "	return c.leasePermits(ctx, 0, fixed)" \
  "	return c.leasePermits(ctx, c.cfg.watchdogTimeout, fixed)" \
  . '^(TestPermitSemaphoreFixedLeaseLossNoticed)$'
# A permit's release that go-redis sent again after a lost reply finds
# the permit gone: the first run released it (the engine's resent rule).
m "permits: re-sent release read as not held" permit_semaphore.go \
  '	case n == 0 && !resent:' \
  '	case n == 0 && (!resent || resent):' \
  . '^(TestPermitSemaphoreReleaseResent)$'
# A permit attempt that failed without an answer may have taken its
# permit: the engine gives it back, for permits as for locks.
m "engine: failed attempt's take not given back" send.go \
  '		if (sent || req.queued) && !leftOnWire(ctx) {' \
  '		if req.queued && !leftOnWire(ctx) {' \
  . '^(TestPermitSemaphoreLostReply)$'
# The Client's waiters on one latch share one zero message: the one it
# reaches wakes the others through the loop's extra wake-up.
m "latch: shared wake-up dropped" synchronizer.go \
  '	case <-w.extra:
' \
  '' \
  . '^(TestCountDownLatchAwait)$'
# A permit that ended leaves the watchdog.
m "permits: an ended permit stays in the watchdog" permit_semaphore.go \
  "	p.s.c.watchdog.Remove(p)" \
  "	_ = p" \
  . '^(TestPermitSemaphoreSharedWatchdog)$'
# UpdateLease waits for a renewal of its permit on the way: otherwise the
# renewal sets the watchdog lease over the fixed one UpdateLease set.
m "permits: UpdateLease does not wait for a renewal" permit_semaphore.go \
  "	p.lease.Lock()
	defer p.lease.Unlock()
	d := s.leaseOf(lease)" \
  "	d := s.leaseOf(lease)" \
  . '^(TestPermitSemaphoreUpdateLeaseDuringRenewal)$'
# A count-down to 0 publishes Redisson's zero message, which wakes waiters.
m "latch: count-down does not publish zero" internal/scripts/latch_count_down.lua \
  "  redis.call(ARGV[1], KEYS[2], 0)
" \
  "" \
  . '^(TestCountDownLatchOperations|TestCountDownLatchAwait)$'
# TrySetCount closes only an open latch: a count that is set stays.
m "latch: try-set overwrites a count" internal/scripts/latch_try_set.lua \
  "if redis.call('exists', KEYS[1]) == 0 then" \
  "if true then" \
  . '^(TestCountDownLatchOperations)$'
# dlock run --spin takes a spin lock: a waiter that polls, not a Mutex
# waiter that sleeps until an unlock message that never comes.
m "cli: run --spin takes a mutex" cmd/dlock/cmd_run.go \
  'return s.clients[0].NewSpinLock(a.name, a.lockOptions()...)' \
  'return s.clients[0].NewMutex(a.name, a.lockOptions()...)' \
  ./cmd/dlock '^(TestRunSpin)$'
# dlock run --permits N sets up the semaphore with N permits, and gives
# its permit back when COMMAND is done.
m "cli: run --permits ignores N" cmd/dlock/semaphore.go \
  'set, err := sem.TrySetPermits(ctx, a.permits.n)' \
  'set, err := sem.TrySetPermits(ctx, 1)' \
  ./cmd/dlock '^(TestRunPermitEnvironment)$'
# --permit-lease D gives the permit a fixed lease D; none, no lease.
m "cli: run --permit-lease D ignored" cmd/dlock/semaphore.go \
  '		return d, nil
	case a.lease.set:' \
  '		return 0, nil
	case a.lease.set:' \
  ./cmd/dlock '^(TestRunPermitLease)$'
m "cli: run --permit-lease none takes a watchdog lease" cmd/dlock/semaphore.go \
  'return dlock.NoPermitLease, nil' \
  'return 0, nil' \
  ./cmd/dlock '^(TestRunPermitLease)$'
m "cli: run --permits keeps its permit at exit" cmd/dlock/semaphore.go \
  'error { return p.sem.Release(permitCtx) }' \
  'error { return nil }' \
  ./cmd/dlock '^(TestRunPermitEnvironment)$'

# --- read-write and fair locks ---
# The watchdog's renewal of a short read hold must not shorten the lock
# hash below another reader's longer hold (a writer would get in).
m "rw: read renewal shortens the lock below another reader's hold" internal/scripts/rw_read_renew.lua \
  "if keep > 0 and redis.call('pttl', lock) < keep then" \
  "if keep > 0 then" \
  . '^(TestRWReadRenewKeepsLongerReaderHold)$'
# A read acquisition with a short lease must not shorten the lock below
# a longer read hold either.
m "rw: read acquire shortens the lock below a longer hold" internal/scripts/rw_read_acquire.lua \
  "if redis.call('pttl', KEYS[1]) < lease then" \
  "if true then" \
  . '^(TestRWReadLeaseExpiry)$'
# A read release that leaves other readers keeps the lock for them.
m "rw: read release with readers left deletes the lock" internal/scripts/rw_read_release.lua \
  "if longest > 0 then" \
  "if false then" \
  . '^(TestRWReadLeaseExpiry)$'
# A write unlock wakes every waiting reader at once, not at the lease.
m "rw: write release does not wake the readers" internal/scripts/rw_write_release.lua \
  "redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1" \
  "return 1" \
  . '^(TestRWWriteUnlockWakesAllReaders)$'
# A fair unlock wakes the head waiter on its own channel; without it the
# head sleeps out the old holder's lease.
m "fair: release does not wake the head waiter" internal/scripts/fair_release.lua \
  "wakeHead(KEYS[3], KEYS[4], now, tonumber(ARGV[4]), ARGV[1], ARGV[3], head, deadline, 0)
return 1" \
  "return 1" \
  . '^(TestRedissonFairWakeUp)$'
# When the head of a free lock's queue gives up, the next waiter is woken
# at once, not when its sleep (the old lease) runs out.
m "fair: leave does not wake the next waiter" internal/scripts/fair_leave.lua \
  "  wakeHead(KEYS[3], KEYS[4], now, wait, ARGV[3], ARGV[4], head, deadline, 0)
end" \
  "end" \
  . '^(TestFairAbandonWakesNextHead)$'
# The waiters behind one that gives up move up by one wait (no drift).
m "fair: leave leaves the deadlines behind unchanged" internal/scripts/fair_leave.lua \
  "shiftAll(KEYS[3], -wait, behind, nil)" \
  "local _ = behind" \
  . '^(TestFairCancelledWaiterLeaves)$'
# A waiter that takes the lock gives the new head one wait past the new
# hold (one ZADD); without it the head keeps the deadline it joined with,
# one wait per place it had then, and a dead head holds the queue up that
# much longer.
m "fair: a grant leaves the queue's deadlines where they were" internal/scripts/fair_acquire.lua \
  "    promote(KEYS[3], after, now + lease + wait)" \
  "    local _ = promote" \
  . '^(TestFairAttemptGrantPromotes)$'
# A joiner's deadline is one wait per place past the lock's expiry, which
# keeps the distances of Redisson's rule without reading the last waiter.
m "fair: a joiner's deadline ignores its place" internal/scripts/fair_acquire.lua \
  "now + held + n * wait, owner)" \
  "now + held + wait, owner)" \
  . '^(TestFairGrantMovesQueueUp)$'
# A waiter that tries again while queued keeps its place: its deadline
# says it is queued already (owners are unique per Lock, so nothing else
# guards the list against a second entry).
m "fair: a queued waiter joins again at the tail" internal/scripts/fair_acquire.lua \
  "local deadline = redis.call('zscore', KEYS[3], owner)" \
  "local deadline = nil" \
  . '^(TestFairLiveWaitersKeepPlace|TestFairGrantOrder)$'
# A head told that the lock is free is not told again within
# fairFreeCheck: each extra message costs it an attempt.
m "fair: a free lock's head told again at once" internal/scripts/fair_queue.lua \
  "  if deadline and deadline <= now + wait and deadline > now + wait - quiet then" \
  "  if false then" \
  . '^(TestFairFreeLockHeadToldOnce)$'
# A Lock on a fair lock found taken lately subscribes before it joins the
# queue, and needs no attempt after subscribing.
m "fair: a contended Lock attempts again after subscribing" fair.go \
  'return time.Since(time.Unix(0, k.busy.Load())) < fairBusyFor' \
  'return false' \
  . '^(TestFairContendedLockSubscribesFirst)$'
# An attempt on a free lock drops a dead head whose deadline has passed;
# without it a waiter that died blocks the queue for good.
m "fair: acquire keeps a dead head" internal/scripts/fair_acquire.lua \
  "head, headDeadline, after = purge(KEYS[2], KEYS[3], now, owner)" \
  "head, headDeadline, after = redis.call('lindex', KEYS[2], 0), math.huge, redis.call('lindex', KEYS[2], 1)" \
  . '^(TestFairDeadWaiterSkipped)$'
# A dlock waiter whose holder record is gone (its process died) leaves
# the queue at the next attempt of another waiter, not at its deadline.
m "fair: a dead dlock waiter kept until its deadline" clientinfo.go \
  'return err == nil && seen == 1' \
  'return err == nil && seen == 2' \
  . '^(TestFairDeadDlockWaiterLeaves|TestFairTryLockPastDeadWaiter)$'
# The acquire script names the head of a free lock's queue for the check.
m "fair: the head of a free lock not named for a check" internal/scripts/fair_acquire.lua \
  "  if not locked or second then" \
  "  if second then" \
  . '^(TestFairTryLockPastDeadWaiter)$'
# A release hands the lock over to a live dlock head waiter of any Client
# and tells it so: the head needs no attempt of its own.
m "fair: release wakes a dlock head instead of handing over" internal/scripts/fair_release.lua \
  "  if two[1] and dlockOwner(two[1]) and handOver(two[1], two[2]) then" \
  "  if false then" \
  . '^(TestFairReleaseHandsOver)$'
# The head takes the message of a hand-over as its grant.
m "fair: a head handed the lock attempts again" wait.go \
  "	return grant{ok: true, token: token, start: w.sent}" \
  "	return grant{}" \
  . '^(TestFairReleaseHandsOver)$'
# A dlock head that nobody listens for (its process died) is not handed
# the lock, which it would hold for a lease: it is woken, and the waiter
# behind it takes it out for dead.
m "fair: a dead dlock head handed the lock" internal/scripts/fair_release.lua \
  "  if not listened(channel) then" \
  "  if false then" \
  . '^(TestFairDeadDlockWaiterLeaves|TestFairTryLockPastDeadWaiter)$'
# The new head behind the one handed the lock gets one wait past the new
# hold, as when a waiter takes the lock itself.
m "fair: a hand-over leaves the new head's deadline where it was" internal/scripts/fair_release.lua \
  "    promote(KEYS[3], after, nowMillis() + lease + tonumber(ARGV[4]))" \
  "    local _ = after" \
  . '^(TestFairJavaWaiterAmongDlockGrants)$'
# A dlock new head keeps its own deadline: a hand-over does not move it.
m "fair: a hand-over moves a dlock new head's deadline" internal/scripts/fair_release.lua \
  "  if after and not dlockOwner(after) then" \
  "  if after then" \
  . '^(TestFairDlockHeadKeepsItselfAhead)$'
# A head whose handle has another lease than the hand-over's sets its own.
m "fair: a hand-over's lease taken for the head's own" wait.go \
  "	case !found || w.req.fence && token == 0 || millis(lease) != millis(w.req.lease):" \
  "	case !found || w.req.fence && token == 0 || millis(lease) < 0:" \
  . '^(TestFairHandOverOtherLease)$'
# A fenced head handed the lock without a token takes a new one.
m "fair: a fenced head handed over without a token keeps the last token" fair.go \
  "	if r.fence && !r.reentry {" \
  "	if false {" \
  . '^(TestFairHandOverFencedWithoutToken)$'
# A waiter that gives up after a hand-over gives the lock back.
m "fair: leave keeps a lock handed to a waiter that gave up" fair.go \
  "if err != nil || n != fairLeftHolding ||" \
  "if err != nil || n != -7 ||" \
  . '^(TestFairLeaveAfterHandOver)$'
# A leave whose answer was lost is sent again, as a release is: it may be
# what gives back a lock handed over to the waiter that left.
m "fair: a failed leave not sent again" background.go \
  '	until := time.Now().Add(max(validity(req.lease), a.holdsUp()))
	grace(h.c.work.run(h.holdKey(req.owner), func(ctx context.Context) {
		holding := false' \
  '	until := time.Now()
	grace(h.c.work.run(h.holdKey(req.owner), func(ctx context.Context) {
		holding := false' \
  . '^(TestFairLeaveAfterHandOverOutlivesOutage)$'
# ... for as long as its place could hold the queue up, not just a lease:
# verify/ saw a fair lock stall for minutes after a partition longer than
# the lease, the places of Locks that gave up during it still queued.
m "fair: a failed leave sent again for a lease only" background.go \
  'until := time.Now().Add(max(validity(req.lease), a.holdsUp()))' \
  'until := time.Now().Add(validity(req.lease))' \
  . '^(TestFairLeaveOutlivesOutageLongerThanLease)$'
# A hand-over message counts only if it ran after the waiter's latest
# attempt that found the lock taken: a late one, whose hold has ended, would
# make a second holder (the reverted first hand-over's defect).
m "fair: hand-over message's clock not checked" fair.go \
  "if ok && (ho.seq > after || !handOverSeqChecked) {" \
  "if ok {" \
  . '^(TestFairStaleHandOverIsNoGrant)$'
m "fair: the clock of an attempt found taken not kept" acquire.go \
  "w.sent, w.seq = start, res.seq" \
  "w.sent = start" \
  . '^(TestFairStaleHandOverIsNoGrant)$'
m "fair: hand-over message carries the clock of before the release" internal/scripts/fair_release.lua \
  "string.format('h:%d:%d:%d', lease, token, nowMicros())" \
  "string.format('h:%d:%d:%d', lease, token, nowMicros() - 1000000)" \
  . '^(TestFairReleaseHandsOver)$'
# The release asks who listens before it publishes a hand-over: published
# first and counted after (the reverted first version), the message still
# reaches subscribers on replicas, whom PUBLISH does not count.
m "fair: hand-over published before its receivers are counted" internal/scripts/fair_release.lua \
  "  if not listened(channel) then" \
  "  if redis.call(ARGV[3], channel, string.format('h:%d:%d:%d', lease, token, nowMicros())) == 0 then" \
  . '^(TestFairHandOverNotPublishedUnheard)$'
# A hand-over whose lease, counted from the waiter's latest attempt that
# found the lock taken, may be half gone is not taken as a grant.
m "fair: a late hand-over's short lease taken" wait.go \
  "	case time.Since(w.sent) >= validity(w.req.lease)/2 || !k.trustsMessages():" \
  "	case !k.trustsMessages():" \
  . '^(TestFairLateHandOverKeepsFullLease)$'
# Where PUBLISH counts only one node's receivers (a cluster's classic pub/sub)
# a release must not hand over: the head would take the message as its
# grant while the lock is freed for anyone.
m "fair: hand-over on a cluster's classic pub/sub" fair.go \
  'return !k.c.cfg.replicas.enabled() && (!k.c.cluster || k.c.publish == "spublish")' \
  'return !k.c.cfg.replicas.enabled()' \
  . '^(TestFairClusterClassicNoHandOver)$'
# A dlock head keeps its own deadline ahead (each of its attempts, at
# least every half wait); a joiner reads only a Redisson head's.
m "fair: a joiner keeps a dlock head ahead" internal/scripts/fair_acquire.lua \
  "if locked and head and not dlockOwner(head) then" \
  "if locked and head then" \
  . '^(TestFairDlockHeadKeepsItselfAhead)$'
# The dlockOwner check in aliveHead only spares a Redisson head's record
# read (no record has its id): not observable, so not a mutation here.
# A waiter joins the queue only once its Client's record is written.
m "fair: joins the queue before its record is written" fair.go \
  '		k.c.record.await(ctx, k.c.done)' \
  '		_ = k.c.done' \
  . '^(TestFairJoinsAfterRecord)$'
# A Redisson waiter has no record by design: it keeps Redisson's timeout.
# Two rules keep it: goneOwner checks only dlock owners (v8 ids), and an
# owner is gone only if its Client is in the seen set, where no Redisson
# id ever is. Dropping the first alone ("if ok && id == c.id") is not
# observable but as one more script call per check, so it is no longer a
# mutation here; the second is ("a never-seen dlock waiter pruned").
# A live dlock waiter, whose record is there, is never pruned.
m "fair: a live dlock waiter pruned" clientinfo.go \
  'if err != nil || exists != 0 {' \
  'if err != nil || exists < 0 {' \
  . '^(TestFairGrantOrder|TestFairLiveWaiterNotTakenForDead)$'
# A waiter whose Client never wrote its record (an ACL without
# ~dlock:client:*) is not taken for dead: it was never seen.
m "fair: a never-seen dlock waiter pruned" clientinfo.go \
  'return err == nil && seen == 1' \
  'return err == nil && seen >= 0' \
  . '^(TestFairNeverSeenWaiterKept)$'
# Each record write marks the Client seen; without it no dead dlock
# waiter is ever pruned.
m "fair: the seen set not written" clientinfo.go \
  'err = seenWrite.Run(ctx, r.rdb, []string{key}, r.id, millis(layout.ClientSeenKeep)).Err()' \
  'err = nil' \
  . '^(TestFairDeadDlockWaiterLeaves|TestFairTryLockPastDeadWaiter)$'
# A waiter pruned for dead is woken, so a live one joins again at once.
m "fair: a pruned waiter not woken" fair.go \
  'unlockMessage, k.c.publish, "1").Err()' \
  'unlockMessage, k.c.publish).Err()' \
  . '^(TestFairPrunedWaiterWoken)$'
# clear-queue wakes each waiter it removed.
m "cli: clear-queue does not wake the waiters" internal/scripts/fair_clear.lua \
  "  redis.call('publish', channel, ARGV[2])" \
  "  local _ = channel" \
  ./cmd/dlock '^(TestClearQueueWakesWaiters)$'
# TryLock never joins the queue.
m "fair: TryLock joins the queue" internal/scripts/fair_acquire.lua \
  "if ARGV[4] ~= '1' then" \
  "if false then" \
  . '^(TestFairTryLockDoesNotQueue)$'
# A ctx deadline that passes while the first subscription is made (a dial
# or socket deadline at ctx's deadline fails it before ctx's timer fires)
# is ErrNotObtained, not a wrapped i/o timeout.
m "wait: deadline during the first subscribe read as a subscribe error" wait.go \
  "		return wake, nil
	case ctxDone(ctx):" \
  "		return wake, nil
	case ctx.Err() != nil:" \
  . '^(TestLockDeadlineDuringFirstSubscribe)$'

# --- batcher, holder records, observer, CLI ---
# A queued script's reply comes from the batch's pipeline, errors
# included: dropping them reads WRONGTYPE as an empty reply.
m "batch: queued scripts lose their errors" internal/transport/batch.go \
  '		for _, q := range batch[1:] {
			close(q.done)' \
  '		for _, q := range batch[1:] {
			q.cmd.SetErr(nil)
			close(q.done)' \
  . '^(TestBatchedScriptsKeepTheirErrors)$'
# dlock top counts a read-write lock's waiters on redisson_rwlock:{name},
# where they subscribe, not on the Mutex's channel.
m "top: read-write waiters counted on the Mutex's channel" cmd/dlock/cmd_top.go \
  'if st.Kind == "rwlock" {' \
  'if st.Kind == "rw" {' \
  ./cmd/dlock '^(TestTopReadWrite)$'
# dlock status says a dlock waiter whose holder record is gone is gone.
m "status: a gone dlock waiter shown as unknown" cmd/dlock/holders.go \
  'w.Gone = dlockOwner && w.Client == nil && w.clientErr == ""' \
  'w.Gone = false && dlockOwner && w.Client == nil && w.clientErr == ""' \
  ./cmd/dlock '^(TestStatusNamesWaiters|TestClearQueue)$'
# A dlock waiter whose record was never written (no ACL for records) is
# unknown, not gone: the library does not drop it either.
m "status: a never-seen dlock waiter shown as gone" cmd/dlock/holders.go \
  'w.clientErr == "" && seen(ctx, rdbs, id)' \
  'w.clientErr == ""' \
  ./cmd/dlock '^(TestStatusNamesWaiters)$'
# dlock list and top show a free fair lock that has a queue.
m "list: a lock with only a queue not listed" cmd/dlock/cmd_list.go \
  'if st.Name != "" && (st.Locked || len(st.Queue) > 0) {' \
  'if st.Name != "" && st.Locked {' \
  ./cmd/dlock '^(TestClearQueue)$'
# The batcher keeps at most maxOnWire (2) batches or lone scripts of a
# Client on the wire; the others wait and go out together.
m "batch: a third batch on the wire" internal/transport/batch.go \
  'if b.onWire < maxOnWire {' \
  'if b.onWire <= maxOnWire {' \
  . '^(TestBatchAtMostTwoOnWire)$'
# A Lock whose ctx can end, on a go-redis client that ignores ctx, waits
# for its script in the batcher itself (leave.go): what a script it left
# on the wire took is given back once that script has its reply, not
# before (the release would run first), ...
m "leave: left script given back before it ran" send.go \
  '		<-pending' \
  '		_ = pending' \
  . '^(TestLockLeavesItsScriptOnTheWire)$'
# ... a batch it is made to send goes out on a helper goroutine, so that
# the caller still returns when its ctx ends, ...
m "leave: a leaving caller sends its batch itself" internal/transport/leave.go \
  'return b.handOver(ctx, func() { b.send(batch) })' \
  'b.send(batch); b.passOn(); return nil' \
  . '^(TestLockLeavesItsScriptOnTheWire)$'
# ... and its script, sent alone for it, is re-sent by go-redis after a
# lost reply and the repeat counted, as any script of Run's.
m "leave: lone script not re-sent after a lost reply" internal/transport/leave.go \
  '_ = b.rdb.Process(context.WithoutCancel(ctx), cmd)' \
  '_ = b.rdb.Process(context.WithoutCancel(ctx), onceCmd{cmd})' \
  . '^(TestLeavingLockSurvivesLostReply)$'
# A hand-over (one struct since the allocation trims) still passes a
# helper's panic to the caller that waits for it, ...
m "leave: a helper's panic swallowed" internal/transport/leave.go \
  '		h.panicked = p' \
  '		h.panicked = nil' \
  . '^(TestLeavingBatchPanicReachesItsSender)$'
# ... and a caller whose ctx ends while its script is on the wire gets the
# script's completion to wait for before anything is given back.
m "leave: caller left without the script's completion" internal/transport/leave.go \
  '			h.left = true' \
  '			h.left = false' \
  . '^(TestLockLeavesItsScriptOnTheWire)$'
# Run checks for NOSCRIPT only on an error (noScript), and still falls
# back to EVAL when Redis lost its script cache.
m "transport: NOSCRIPT not followed by EVAL" internal/transport/transport.go \
  '	return scripts.Source(s)' \
  '	return ""' \
  . '^(TestScriptFlush)$'
# The holder record lives as long as the watchdog timeout, so a dead
# process's record goes when its locks do.
m "record: TTL not the watchdog timeout" clientinfo.go \
  'args := []any{millis(ttl),' \
  'args := []any{millis(1000 * ttl),' \
  . '^(TestClientRecordWrittenAtFirstLock)$'
# The record names this process, not its parent.
m "record: the parent's pid" clientinfo.go \
  'strconv.Itoa(os.Getpid())' \
  'strconv.Itoa(os.Getppid())' \
  . '^(TestClientRecordWrittenAtFirstLock)$'
# The record is written again every third of its TTL while the Client
# lives: it would expire under a long hold, and not come back if deleted.
m "record: not refreshed" clientinfo.go \
  '		case <-t.C:
			r.write(ctx)' \
  '		case <-t.C:' \
  . '^(TestClientRecordRefreshed)$'
# Close deletes the record rather than leaving it to its TTL.
m "record: not deleted at Close" clientinfo.go \
  '_ = r.rdb.Del(ctx, r.key).Err()' \
  '_ = ctx' \
  . '^(TestClientRecordDeletedAtClose)$'
# LockEnd.Wait is the whole call, from LockStart.
m "observer: wait time not from LockStart" observe.go \
  'Wait: now.Sub(o.start)' \
  'Wait: time.Since(now)' \
  . '^(TestObserverLockWaitReentryUnlock)$'
# A renewal reports how many of its holds Redis no longer had.
m "observer: renewal counts the live holds as lost" observe.go \
  '		if !a {
			r.Lost++' \
  '		if a {
			r.Lost++' \
  . '^(TestObserverLostAndRenewal)$'
# A hold lost at its local deadline is expired, not rejected.
m "observer: every loss reported as rejected" observe.go \
  'if !at.Before(c.holds.deadline(hd)) {' \
  'if false {' \
  . '^(TestObserverLostAndRenewal)$'
# Close reports the holds it ends as lost (cause closed).
m "observer: holds ended by Close not reported" observe.go \
  '		c.lost(hd, hd.acqs, LostClosed, ErrClosed)' \
  '		_ = hd' \
  . '^(TestObserverClosedAndReconnect)$'
# dlockotel counts the holds a renewal found gone as renewed, outcome lost.
m "otel: renewal losses not counted" dlockotel/dlockotel.go \
  '		if r.Lost > 0 {' \
  '		if false {' \
  ./dlockotel '^(TestRenewalFindsLost)$'
# Each lock kind declares the Kind its events report.
m "observer: a kind reports another's Kind" fair.go \
  'func (k *fairKind) label() string               { return KindFair }' \
  'func (k *fairKind) label() string               { return KindMutex }' \
  . '^(TestObserverKinds)$'
# A Semaphore's Acquire is reported as a lock's wait and hold.
m "observer: semaphore acquire not observed" semaphore.go \
  'ob := s.c.observeWait(ctx, LockInfo{Name: s.name, Kind: KindSemaphore}, nil, OutcomeAcquired)' \
  'var ob *lockObs' \
  . '^(TestObserverSemaphore)$'
# A Semaphore's Release ends a hold: Unlocked.
m "observer: semaphore release not observed" semaphore.go \
  '	defer s.c.observeRelease(ctx, LockInfo{Name: s.name, Kind: KindSemaphore}, nil, &err)' \
  '' \
  . '^(TestObserverSemaphore)$'
# The synchronizers' sleeps are reported as Wait rounds.
m "observer: synchronizer sleeps not reported" acquire.go \
  '		c.observer().sleeping(res)' \
  '' \
  . '^(TestObserverSemaphore|TestObserverPermitSemaphore|TestObserverCountDownLatch)$'
# A permit that ends without Release is lost, as a lock's hold is.
m "observer: permit loss not observed" permit_semaphore.go \
  '		p.s.c.observeLoss(LockInfo{Name: p.s.name, Kind: KindPermit}, p, expired, cause)' \
  '		_ = expired' \
  . '^(TestObserverPermitSemaphore)$'
# A permit that Release ends is released, not lost.
m "observer: released permit reported lost" permit_semaphore.go \
  '	if !releasing {' \
  '	if !releasing || true {' \
  . '^(TestObserverPermitSemaphore)$'
# A permit whose local lease ran out is lost as expired, not rejected.
m "observer: permit expiry reported as rejected" observe.go \
  '	case expired:
		e.Cause = LostExpired' \
  '	case false:
		e.Cause = LostExpired' \
  . '^(TestObserverPermitSemaphore)$'
# A latch's Await ends opened, not acquired: no hold follows.
m "observer: latch await reported as acquired" countdownlatch.go \
  'nil, OutcomeOpened)' \
  'nil, OutcomeAcquired)' \
  . '^(TestObserverCountDownLatch)$'
# dlockotel counts a latch's Await as a wait, not as a failure.
m "otel: latch await counted as a failure" dlockotel/dlockotel.go \
  '		case dlock.OutcomeOpened: // a latch' \
  '		case "": // a latch' \
  ./dlockotel '^(TestCountDownLatch)$'
# dlockotel records no hold duration that is not known (a Semaphore's).
# A Semaphore's permits have no holder: the holds gauge leaves them out.
m "otel: semaphore permits counted as holds" dlockotel/dlockotel.go \
  'if !e.Reentry && l.Kind != dlock.KindSemaphore {' \
  'if !e.Reentry {' \
  ./dlockotel '^(TestSemaphore)$'
m "otel: unknown hold time recorded" dlockotel/dlockotel.go \
  'if u.Held >= 0 {' \
  'if true {' \
  ./dlockotel '^(TestSemaphore)$'
# dlockotel names a synchronizer's span after its method.
m "otel: synchronizer span named Lock" dlockotel/dlockotel.go \
  '		return "dlock.Await"' \
  '		return spanLock' \
  ./dlockotel '^(TestCountDownLatch)$'
# dlock top's HOLDS is the sum over a lock's holders (several readers).
m "top: one holder's holds only" cmd/dlock/cmd_top.go \
  'rows[i].Holds += h.Holds' \
  'rows[i].Holds = h.Holds' \
  ./cmd/dlock '^(TestTopReaders)$'
# Among locks with as many waiters, the most held comes first.
m "top: least held first" cmd/dlock/cmd_top.go \
  'cmp.Compare(b.Holds, a.Holds)' \
  'cmp.Compare(a.Holds, b.Holds)' \
  ./cmd/dlock '^(TestTopReaders)$'
# dlock hold releases the lock when a signal ends it, rather than leaving
# it to its lease.
m "hold: not released on a signal" cmd/dlock/cmd_hold.go \
  'if err := release(lk, lockCtx); err != nil {' \
  'if err := error(nil); err != nil {' \
  ./cmd/dlock '^(TestHold)$'
# A lost hold makes dlock hold exit 6.
m "hold: a lost lock exits 0" cmd/dlock/cmd_hold.go \
  'return exitf(exitLockLost, "%s; no longer holding it"' \
  'return exitf(0, "%s; no longer holding it"' \
  ./cmd/dlock '^(TestHoldLockLost)$'

# --- leader election and deadlock detection ---
# Observers drop a change not newer than the last one they took: a lost
# leader's late "ended" must not follow the next leader.
m "election: observe delivers a stale revision" election.go \
  '	if !r.after(o.last) {
		return
	}' \
  '	if r == o.last {
		return
	}' \
  . '^(TestElectionStaleEndDropped)$'
# The keeper that finds the leadership gone from Redis ends the leader
# context (the record deleted: only the keeper can tell).
m "election: leader context not cancelled on loss" election.go \
  '				l.abdicate(leaderCtx)' \
  '				_ = leaderCtx' \
  . '^TestElectionLossCancelsLeaderCtx$/^record$'
# A leader whose Client finds the leadership lost tells the observers.
m "election: loss not announced" election.go \
  '	if l.e.c.isClosed() {
		return
	}
	ctx, cancel' \
  '	if true {
		return
	}
	ctx, cancel' \
  . '^TestElectionLossCancelsLeaderCtx$/^lock$'
# Proclaim must be refused to a leadership that is not the record's.
m "election: proclaim without the lock" internal/scripts/election_proclaim.lua \
  "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end" \
  "" \
  . '^(TestElectionCampaignProclaimResign)$'
# A leader whose record is gone but whose lock is not gives the lock back,
# or nobody could lead until its lease ran out.
m "election: record gone, lock kept" election.go \
  '	l.e.m.giveBack(request{owner: l.owner, lease: acq.hold.lease})' \
  '' \
  . '^TestElectionLossCancelsLeaderCtx$/^record$'
# A Campaign whose ctx's owner holds the lock would re-enter it.
m "election: campaign re-enters the lock" election.go \
  'ok && e.c.holds.held(e.m.holdKey(owner)) != nil' \
  'false && ok && e.c.holds.held(e.m.holdKey(owner)) != nil' \
  . '^(TestElectionRefusesReentry)$'
# The record outlives the lock's TTL by a keep interval.
m "election: record expires with the lock" election.go \
  'e.c.publish, e.slack().Milliseconds(),' \
  'e.c.publish, 0,' \
  . '^(TestElectionRecordOutlivesLock)$'
# An elected Campaign records the leader on the leadership's time.
m "election: elect on the caller's ctx" election.go \
  'ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx),' \
  'ectx, cancel := context.WithTimeout(ctx,' \
  . '^(TestElectionCampaignCtxEndsAfterLock)$'
# An observer whose subscription is refused polls instead of hanging.
m "election: observe hangs on a refused subscription" election.go \
  '	case <-wait.C:
		// Refused' \
  '	case <-make(chan time.Time):
		// Refused' \
  . '^(TestElectionObserveSubscriptionRefused)$'
# An observer whose subscription was opened again reads the record: the
# changes published meanwhile were lost.
m "election: observer ignores a resubscription" election.go \
  '			if gap {
				safety.Reset(0)
			}' \
  '			_ = gap' \
  . '^(TestElectionObserverMissedChange)$'
m "hub: listeners not told of a resubscription" internal/pubsub/hub.go \
  '		ch.missed()
' \
  '' \
  . '^(TestElectionObserverMissedChange)$'
# dlock elect --on-loss recampaign campaigns again after a loss.
m "elect: --on-loss recampaign exits" cmd/dlock/cmd_elect.go \
  'if a.onLoss != "recampaign" {' \
  'if true {' \
  ./cmd/dlock '^TestElectOnLoss$/^recampaign$'
# dlock deadlocks exits with its own status when it finds a cycle.
m "deadlocks: exit 0 on a cycle" cmd/dlock/cmd_deadlocks.go \
  '	if len(found) > 0 {
		return exitf(exitDeadlock' \
  '	if false {
		return exitf(exitDeadlock' \
  ./cmd/dlock '^TestDeadlocks$'
# The youngest waiter of a cycle backs off, not another one.
m "deadlock: cycle check skips the youngest" deadlock.go \
  '		y := youngest(d)
		victims' \
  '		y := d.Waits[len(d.Waits)-1]
		victims' \
  . '^(TestDeadlockBroken)$'
# A Lock that sleeps while its owner may hold locks is recorded.
m "deadlock: wait not recorded" deadlock.go \
  '			ws.begin(w)' \
  '			_ = w' \
  . '^(TestDeadlockReported)$'
# A wait's record goes when its Lock returns.
m "deadlock: wait record kept after the Lock returned" deadlock.go \
  '		delete(ws.current, w)
		ws.poke()' \
  '		ws.poke()' \
  . '^(TestDeadlockReported)$'
# An index entry whose record expired without being deleted is pruned.
m "deadlock: index not pruned" deadlock.go \
  "redis.call('zremrangebyscore', KEYS[2], '-inf', now)" \
  "" \
  . '^(TestDeadlockIndexPruned)$'
# A failed write of the wait record is tried again soon.
m "deadlock: failed wait-record write not retried" deadlock.go \
  'retryC, pause = retry.C, min(2*pause, every)' \
  'pause = min(2*pause, every)' \
  . '^(TestDeadlockWriteRetried)$'
# The wait loop stops when the Client has no waits.
m "deadlock: wait loop runs while idle" deadlock.go \
  'if written != 0 || len(ws.current) > 0 || ws.stop == nil {' \
  'if true {' \
  . '^(TestDeadlockIdle)$'
# Only the youngest waiter of a cycle found is failed: no false positive.
m "deadlock: every waiter taken for a victim" deadlock.go \
  '		found := victims[w.field]' \
  '		found := true' \
  ./internal/chaos '^TestDeadlockDetection$'
# A deadlock victim's error does not claim that a context ended.
m "deadlock: victim's error wraps context.Canceled" deadlock.go \
  'ErrDeadlock, h.name, owner, ErrNotObtained)' \
  'ErrDeadlock, h.name, owner, err)' \
  . '^(TestDeadlockBroken)$'

# verify/: a partition must really cut the traffic between its sides.
m "verify: partition drops nothing" verify/netns.go \
  'return ip(ctx, "-n", from.NS, "route", "add", "blackhole", to.Addr+"/32")' \
  'return nil' \
  ./verify '^(TestPartitionStopsTraffic)$'
# verify/: a run leaves no namespace behind.
m "verify: Close leaves the nodes' namespaces" verify/netns.go \
  'errs = append(errs, delNS(ctx, nd.NS))' \
  '_ = nd' \
  ./verify '^(TestNetLeavesNothing)$'
# verify/: a run that fails still kills every process it started.
m "verify: a run leaves its servers running" verify/scenario.go \
  '	defer topo.Close()' \
  '	_ = topo.Close' \
  ./verify '^(TestFailedRunLeavesNothing)$'
# verify/: the ignore-lost control must really ignore its lock context,
# and the smoke must notice when a control escapes its checker.
m "verify: the broken client honours its lock context" verify/worker.go \
  'ctx = context.WithoutCancel(hctx)' \
  'ctx = hctx' \
  ./verify '^(TestSmoke)$'
# verify/: the mutex model grants one holder at a time.
m "verify: mutex model grants a held lock" verify/check.go \
  'case in.Op == "acquire" && holder == -1:' \
  'case in.Op == "acquire":' \
  ./verify '^(TestCheckersOnSyntheticHistories|TestUnreleasedHoldIsOpen|TestPorcupineAgainstIntervals)$'
# verify/: the semaphore model grants at most n permits.
m "verify: semaphore model grants one permit too many" verify/check.go \
  'len(held) < n &&' \
  'len(held) <= n &&' \
  ./verify '^(TestCheckersOnSyntheticHistories)$'
# verify/: a lock that stays unavailable to the end of a run shows in the
# max unavailability, not only the time between two successes.
m "verify: max unavailability ignores failed attempts" verify/check.go \
  '		case e.Kind == "ok" || e.Kind == "fail":' \
  '		case e.Kind == "ok":' \
  ./verify '^(TestMaxUnavailable)$'
# verify/: a hold (pause-waiter's slow subscription) holds back even the
# first segment sent on the connection after it began.
m "verify: hold lets its first segment through" verify/netns.go \
  '		_, err = c.Write(make([]byte, 1000))' \
  '		_ = c' \
  ./verify '^(TestHoldDelaysOneConnection)$'
# dlockrueidis/: the rueidis driver falls back to EVAL after NOSCRIPT, and
# subscribes its channels again (with notice) on a new pub/sub connection.
m "rueidis: no EVAL after NOSCRIPT" dlockrueidis/driver.go \
  'if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {' \
  'if false && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {' \
  ./dlockrueidis '^(TestNoScriptFallback)$'
m "rueidis: a new pub/sub connection does not resubscribe" dlockrueidis/pubsub.go \
  '	if len(p.chans) > 0 {' \
  '	if false && len(p.chans) > 0 {' \
  ./dlockrueidis '^(TestResubscribeWakesWaiters)$'
# A Subscribe whose ctx has ended fails and changes nothing: the reader
# alone opens a new connection and subscribes the old channels again.
m "rueidis: a Subscribe with an ended ctx goes ahead" dlockrueidis/pubsub.go \
  'if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return redis.ErrClosed
	}
	for _, n := range names {' \
  'p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return redis.ErrClosed
	}
	for _, n := range names {' \
  ./dlockrueidis '^(TestResubscribeSurvivesEndedSubscribe)$'
# The wait for a connection of rueidis's blocking pool (which the
# application's BLPOPs share) ends with the reader's ctx or Close.
m "rueidis: the pub/sub connection waits for the pool unbounded" dlockrueidis/pubsub.go \
  '	got, abandon := make(chan rueidis.DedicatedClient), make(chan struct{})
' \
  '	got, abandon := make(chan rueidis.DedicatedClient), make(chan struct{})
	if dc, _ := p.c.Dedicate(); dc != nil {
		return dc, nil
	}
' \
  ./dlockrueidis '^(TestWaiterEndsWhileBlockingPoolIsFull)$'
# A cluster whose user may not run PUBSUB SHARDNUMSUB falls back to
# classic pub/sub, as the go-redis driver does, so both hear each other.
m "rueidis: no classic pub/sub fallback on a cluster" dlockrueidis/driver.go \
  '	if d.cluster && d.sharded(sharded, log) {' \
  '	if d.cluster && (sharded == nil || *sharded) {' \
  ./dlockrueidis '^(TestClusterClassicFallback)$'
# NewRedLock refuses two rueidis Clients on one server, by address.
m "rueidis: no address for RedLock's distinct-server check" dlockrueidis/driver.go \
  '	if d.c.Mode() == rueidis.ClientModeSentinel {' \
  '	if true || d.c.Mode() == rueidis.ClientModeSentinel {' \
  ./dlockrueidis '^(TestRedLockSameServerRefused)$'
m "rueidis: scripts ignore ctx's deadline" dlockrueidis/driver.go \
  'cmd := toCmd(ctx, d.c.Do(ctx, d.c.B().Evalsha()' \
  'cmd := toCmd(ctx, d.c.Do(context.WithoutCancel(ctx), d.c.B().Evalsha()' \
  ./dlockrueidis '^(TestLockEndsByDeadline)$'
# The rueidis driver hands the core replies as go-redis would: an error
# reply as a redis.Error (the core tells NOSCRIPT, MOVED, NOPERM by it),
# a nil reply as redis.Nil (HoldCount reads HGET's nil as "not held").
# The contract suite on rueidis (internal/contract) catches a conversion
# that loses either.
m "rueidis: an error reply loses its redis.Error type" dlockrueidis/reply.go \
  '		return replyError(re.Error())' \
  '		return errors.New(re.Error())' \
  ./dlockrueidis '^(TestContract)$'
m "rueidis: a string reply's nil is not redis.Nil" dlockrueidis/commands.go \
  '	s, err := res.ToString()
	cmd.SetVal(s)
	cmd.SetErr(convErr(err))' \
  '	s, err := res.ToString()
	cmd.SetVal(s)
	cmd.SetErr(err)' \
  ./dlockrueidis '^(TestContract)$'
# verify/: the fenced register refuses a lower token.
m "verify: fenced register without its check" verify/worker.go \
  "if ARGV[2] == '1' then" \
  "if false then" \
  ./verify '^(TestFencedRegister)$'

# The permit semaphore's scripts take the time from the server, not from
# the client's wall clock, which they get in ARGV[1] (through the seam the
# verify/ harness jumps, internal/clock): a client whose clock is ahead
# reclaimed the permits others held.
m "permit scripts read the client's clock" internal/scripts/psem_clock.lua \
  "  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)" \
  "  return tonumber(ARGV[1])" \
  . '^(TestPermitClockJump)$'
# A permit's expiry is the server's now plus the lease the client sends,
# not an expiry the client computed on its clock.
m "permit lease written on the client's clock" internal/scripts/psem_clock.lua \
  "  return now + tonumber(lease)" \
  "  return tonumber(ARGV[1]) + tonumber(lease)" \
  . '^(TestPermitClockJump)$'
# verify/: the Cluster topology finds the master of the lock's slot.
m "verify: cluster master is the first server" verify/cluster.go \
  "if p.Node.Addr == addr {" \
  "if p == t.Servers[0] {" \
  ./verify '^(TestClusterTopology)$'
# The sharded hub: one connection per master, one SSUBSCRIBE per slot
# (a cluster refuses one across slots with CROSSSLOT), its own
# resubscription after a reconnect, and a moved slot's channels moved.
m "hub: one SSUBSCRIBE for every slot of a connection" internal/pubsub/hub.go \
  'slot := h.route.Slot(name)
			bySlot[node][slot]' \
  'slot := 0
			bySlot[node][slot]' \
  . '^(TestClusterHubReconnectEverySlot)$'
m "hub: connection per slot" client.go \
  '				return m.Options().Addr' \
  '				return m.Options().Addr + "/" + strconv.Itoa(int(layout.Slot(channel)))' \
  . '^(TestClusterSubscriptionsPerMaster)$'
m "hub: a moved slot's channels not subscribed again" internal/pubsub/hub.go \
  '	h.rehomeLater(moved, retries)' \
  '	_, _ = moved, retries' \
  . '^(TestClusterReshardMovesOneSlot)$'
m "rueidis: one SSUBSCRIBE for every slot on reopen" dlockrueidis/pubsub.go \
  'bySlot[layout.Slot(ch)] = append(bySlot[layout.Slot(ch)], ch)' \
  'bySlot[layout.Slot("")] = append(bySlot[layout.Slot("")], ch)' \
  ./dlockrueidis '^(TestClusterSubscriptionsPerMaster)$'
# The rueidis router's CLUSTER SLOTS ends with its caller's ctx (a
# Subscribe's deadline, the hub's Close), is read by lookups only until the
# first load ended, and is sent once for concurrent reloads. rueidis keeps
# only the deadline while it dials (its handshake), so the caller waits
# for the read in a select, not inline.
m "route: CLUSTER SLOTS read inline, past its caller's cancel" internal/pubsub/coalesce.go \
  '	go func() {' \
  '	func() {' \
  ./dlockrueidis '^(TestRouterLeavesADialThatIgnoresCancel)$'
# A send that failed because a reopen retired its connection leaves the
# channel to the hub, which moved it: the Subscribe does not fail.
m "hub: a send on a retired connection fails its Subscribe" internal/pubsub/hub.go \
  '	if err != nil && !h.closed && j.ch.shard != j.s && h.channels[j.w.name] == j.ch {' \
  '	if false {' \
  ./internal/pubsub '^(TestSendOnARetiredConnectionKeepsTheWaiter)$'
# Reload waits on its caller's ctx, not on the bounded one it cancels
# when the reload returns (that would report a reload that returned as
# left, and the router would read no table).
m "reload: waits on the bounded ctx" internal/pubsub/coalesce.go \
  '	case <-ctx.Done():
		return false' \
  '	case <-time.After(0):
		return false' \
  ./internal/pubsub '^(TestReloadReportsWhatHappened)$'
m "hub: go-redis Refresh read inline, past its caller's cancel" client.go \
  '			pubsub.Reload(ctx, func(ctx context.Context) {' \
  '			func(f func(context.Context)) { f(ctx) }(func(ctx context.Context) {' \
  . '^(TestClusterRouterRefreshLeavesWithCaller)$'
m "route: every lookup loads while the table is unread" dlockrueidis/route.go \
  '	first := !r.tried' \
  '	first := r.ranges == nil' \
  ./dlockrueidis '^(TestRouterHonoursCallerAndCoalesces)$'
m "route: concurrent reloads not coalesced" dlockrueidis/route.go \
  '	r.refresh = pubsub.Coalesce(r.load)' \
  '	r.refresh = r.load' \
  ./dlockrueidis '^(TestRouterHonoursCallerAndCoalesces)$'
# The go-redis router's Refresh returns once the slot table is reloaded
# (ReloadState only starts a reload).
m "hub: Refresh does not wait for the slot table" client.go \
  '			_ = cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })' \
  '			cc.ReloadState(ctx)' \
  . '^(TestClusterRouterRefreshReloads)$'
# An error reply to one SSUBSCRIBE: MOVED moves that slot's channels
# only, and a refusal for good (NOPERM) is reported, not retried by
# reopening the connection every 250 ms.
m "hub: MOVED reopens the whole connection" internal/pubsub/hub.go \
  '				h.moveSlot(s, slot)
				continue' \
  '				h.reopen(s)
				_ = slot
				return' \
  ./internal/pubsub '^(TestClusterMovedMovesOneSlot)$'
m "hub: a refused SSUBSCRIBE reopens the connection" internal/pubsub/hub.go \
  '			if h.OnError != nil {
				h.OnError(err)
			}
		case errors.As(err, &nerr) && nerr.Timeout():' \
  '			if h.sharded {
				h.reconnecting(err)
				h.reopen(s)
				return
			}
			if h.OnError != nil {
				h.OnError(err)
			}
		case errors.As(err, &nerr) && nerr.Timeout():' \
  ./internal/pubsub '^(TestClusterRefusalReported)$'
# Channels moved to another connection are subscribed after the hub's
# mutex is released: a dial to a node that does not answer must not hold
# up every other waiter.
m "hub: rehome dials under the mutex" internal/pubsub/hub.go \
  '	h.mu.Unlock()
	for _, p := range plan {
		for _, names := range p.slots {
			if p.err = h.subscribe(h.life, p.s.ps, names...); p.err != nil {
				break
			}
		}
	}
	h.mu.Lock()' \
  '	for _, p := range plan {
		for _, names := range p.slots {
			if p.err = h.subscribe(h.life, p.s.ps, names...); p.err != nil {
				break
			}
		}
	}' \
  ./internal/pubsub '^(TestClusterRehomeDoesNotBlockHub)$'
# A Subscribe sends its (S)SUBSCRIBE, and dials a new connection, after
# the hub's mutex is released: a node that does not answer must not hold
# up the Subscribes of other nodes' channels.
m "hub: Subscribe dials under the mutex" internal/pubsub/hub.go \
  '	err := h.subscribe(ctx, j.s.ps, j.w.name)
	h.mu.Lock()' \
  '	h.mu.Lock()
	err := h.subscribe(ctx, j.s.ps, j.w.name)' \
  ./internal/pubsub '^(TestClusterSubscribeDoesNotBlockHub)$'
# Subscribes that joined a channel whose send failed try again: they
# must not wait for a confirmation that will never come.
m "hub: a failed send leaves its joiners waiting" internal/pubsub/hub.go \
  '	close(j.ch.sent)
	if err == nil && h.closed {' \
  '	if err == nil {
		close(j.ch.sent)
	}
	if err == nil && h.closed {' \
  ./internal/pubsub '^(TestClusterFailedSendRetriedByJoiner)$'
# A refused SSUBSCRIBE is never confirmed: its in-flight count must go,
# or the channel's next subscription is never ready.
m "hub: a refusal keeps the in-flight counts" internal/pubsub/hub.go \
  '			h.refused(s)
' \
  '' \
  ./internal/pubsub '^(TestClusterRefusalLeavesNoCount)$'
# Close closes the connections off the mutex and waits for them a
# bounded time: go-redis's Close waits for a dial to a frozen node.
m "hub: Close waits for every connection to close" internal/pubsub/hub.go \
  'go func() { closed <- s.closeConn() }()' \
  'closed <- s.closeConn()' \
  ./internal/pubsub '^(TestClusterCloseDoesNotWaitForAFrozenDial)$'
# A connection taken out of the hub is closed off the mutex: go-redis's
# Close waits for a dial in progress on it.
m "hub: a retired connection closed under the mutex" internal/pubsub/hub.go \
  '	go func() {
		defer h.done.Done()
		_ = s.closeConn()' \
  '	func() {
		defer h.done.Done()
		_ = s.closeConn()' \
  ./internal/pubsub '^(TestClusterLastLeaveDoesNotBlockHub)$'
# A classic hub's reopened connection subscribes the channels that still
# have waiters after its pause, not those it had before.
m "hub: reopen subscribes channels whose waiters left" internal/pubsub/hub.go \
  '	for _, ch := range h.channels {
		if ch.shard == s {
			ch.shard, ch.moved = ns, true
		}
	}
	h.shards[s.key] = ns
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		// Give the server a moment; on error go-redis keeps the channels
		// and resubscribes them when the reader reconnects.
		if sleep(h.life, backoff(retries)) {
			if names := h.pending(ns); len(names) > 0 {' \
  '	var names []string
	for name, ch := range h.channels {
		if ch.shard == s {
			ch.shard, ch.moved = ns, true
			ns.inflight[name]++
			names = append(names, name)
		}
	}
	h.shards[s.key] = ns
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		if sleep(h.life, backoff(retries)) {
			if len(names) > 0 {' \
  ./internal/pubsub '^(TestReopenSkipsLeftChannels)$'
# A Lock must not fail on the bound of an attempt handed aside, a
# deadline its caller never set.
m "send: an aside attempt's bound fails the Lock" wait.go \
  'patience = max(patience, asidePatience)' \
  'patience = max(patience, 0)' \
  . '^(TestLockWithoutDeadlineOutlastsAsideBound)$'
# ...but a Lock whose aside attempts keep running out of their bound gives
# up after asidePatience, with a warning per try, not silently never.
m "send: aside timeouts retried past patience" wait.go \
  'if patience == 0 || failing > patience {' \
  'if patience == 0 || failing > patience && !errors.Is(err, errAsideTimeout) {' \
  . '^(TestLockGivesUpOnAsideTimeoutsPastPatience)$'
# Only a timeout is the aside bound's doing: a late refusal stays itself.
m "send: a late refusal marked as the aside bound" send.go \
  'if actx.Err() != nil && isTimeout(err) {' \
  'if actx.Err() != nil && err != nil {' \
  . '^(TestAsideBoundMarksOnlyTimeouts)$'
# Create's lock_timeout is its own (set_config local, given back): a
# caller that runs Create in its transaction keeps its own bound for its
# later statements, and a session keeps its lock_timeout.
m "SQL fence Create keeps its lock_timeout in the caller's tx" fence.go \
  "
    PERFORM set_config('lock_timeout', previous, true);" \
  '' \
  ./fencetest '^(TestCreateKeepsCallersLockTimeout)$'
m "SQL fence Create sets lock_timeout for the session" fence.go \
  "PERFORM set_config('lock_timeout', '\` + fenceAlterLockTimeout + \`', true);" \
  "PERFORM set_config('lock_timeout', '\` + fenceAlterLockTimeout + \`', false);" \
  ./fencetest '^(TestCreateKeepsCallersLockTimeout)$'
# Watchdog holds and fixed-lease holds renewed by the same script are two
# renewal groups: one script call sets one lease, that of the first
# entry, so in one group a fixed lease would be cut or raised to the
# watchdog timeout, or a watchdog hold only checked until it runs out.
m "renew: watchdog and fixed-lease holds in one group" renew.go \
  '	if !hd.watchdog {
		g += ":fixed"
	}' \
  '' \
  . '^(TestWatchdogAndFixedLeaseOnOneClient)$'
# An error reply to a script that must run at most once (RunOnce) is a
# reply: Redis's error (WRONGTYPE), not ErrNoReply, which tells the
# caller the operation may have been applied. On both drivers.
m "RunOnce: an error reply wrapped as ErrNoReply" internal/transport/transport.go \
  'if err != nil && !isReply(err) && !NotSent(err) && !errors.Is(err, ErrUnreachable) {' \
  'if err != nil && !NotSent(err) && !errors.Is(err, ErrUnreachable) {' \
  . '^(TestRunOnceErrorReplyIsNotNoReply)$'
m "rueidis: RunOnce wraps an error reply as ErrNoReply" dlockrueidis/driver.go \
  'if err != nil && !isReply(err) && !transport.NotSent(err) {' \
  'if err != nil && !transport.NotSent(err) {' \
  ./dlockrueidis '^(TestRunOnceErrorReplyIsNotNoReply)$'
# A healthy idle connection is pinged and kept: a reader that took its
# silence for a frozen server would reopen it every few seconds, and
# wake every waiter for a message it may have missed each time.
m "hub: the answer to a ping is forgotten" internal/pubsub/hub.go \
  '			pinged, failures = false, 0' \
  '			failures = 0' \
  ./internal/pubsub '^(TestIdleConnectionKept)$'
m "hub: a silent connection is not pinged" internal/pubsub/hub.go \
  '			_ = s.ps.Ping(ctx)
' \
  '' \
  ./internal/pubsub '^(TestIdleConnectionKept)$'
# The rueidis driver reports a refused SUBSCRIBE (NOPERM) to the hub,
# which logs it, as go-redis's PubSub does: dropped, the waiters would
# wait for a confirmation that never comes, and nobody would know why.
m "rueidis: a refused SUBSCRIBE is dropped" dlockrueidis/pubsub.go \
  '			case isReply(err):
				p.push(dc, err)
' \
  '' \
  ./dlockrueidis '^(TestSubscriptionRefusedIsLogged)$'
# A waiter that leaves from the middle of the fair queue moves up only
# the waiters behind it: an earlier deadline for the head (or any waiter
# ahead) has it dropped for dead that much sooner.
m "fair: a mid-queue leave moves every deadline up" internal/scripts/fair_leave.lua \
  "shiftAll(KEYS[3], -wait, behind, nil)" \
  "shiftAll(KEYS[3], -wait, nil, nil)" \
  . '^(TestFairMidQueueLeaveMovesOnlyThoseBehind)$'
m "fair: a leave moves up the waiter ahead of it" internal/scripts/fair_leave.lua \
  "for i = at + 1, #queue do" \
  "for i = at - 1, #queue do" \
  . '^(TestFairMidQueueLeaveMovesOnlyThoseBehind)$'
# WithBackoff takes initial == most (Redisson's ConstantBackOff). The
# Examples check their constructors' errors: a refused option fails
# ExampleWithBackoff with the error as its output, instead of a nil
# dereference that panics the whole test binary.
m "spin: a constant backoff refused" spin.go \
  'c.spinMax < c.spinInitial ||' \
  'c.spinMax <= c.spinInitial ||' \
  . '^(ExampleWithBackoff)$'

# A holder resumed after a pause past its lease looks at its lock context
# before the expiry timer runs: the look itself must find the lease over
# (issue 35), for every kind kept in the registry...
m "lock context: an overdue hold reads as live" hold.go \
  '	if hd.until.get() > instantOf(r.now()) {
		return nil, false, false
	}
	r.mu.Lock()' \
  '	if true {
		return nil, false, false
	}
	r.mu.Lock()' \
  . '^(TestResumedHolderSeesItsLeaseOver)$'
# ...and for a PermitSemaphore's permit context, which keeps its own.
m "permit context: an overdue permit reads as live" permit_semaphore.go \
  '	if p.releasing || p.s.c.holds.now().Before(p.until) {' \
  '	if true || p.releasing || p.s.c.holds.now().Before(p.until) {' \
  . '^(TestResumedHolderSeesItsLeaseOver)$'
# On resume the timer's sweep may have taken the hold (or its timer marked
# the permit ended) without cancelling the context yet: the holder's look
# in that window must find it ended (seen with SIGSTOP: 1 in 14 rounds).
m "lock context: a hold the sweep took reads as live" hold.go \
  '	case taken && !a.ended(): // another path took the hold out, and ends a soon' \
  '	case false && taken && !a.ended():' \
  . '^(TestResumedHolderRacesTheSweep)$'
m "permit context: a permit its timer ended reads as live" permit_semaphore.go \
  '	p.cancel(cause)
	if mine {
		go p.finish(cause, true, false)' \
  '	if mine {
		p.cancel(cause)
		go p.finish(cause, true, false)' \
  . '^(TestResumedHolderRacesTheSweep)$'
# The look that finds a hold overdue must not run the user's Lost hook
# on the looker's goroutine, which may hold a lock the hook takes.
m "lock context: the look runs the Lost hook itself" hold.go \
  '		go hd.c.tellLost(hd, acqs, err, hd.c.holds.now())' \
  '		hd.c.tellLost(hd, acqs, err, hd.c.holds.now())' \
  . '^(TestLookDoesNotRunLostHook)$'
# FenceOf (and Token) on an overdue lock context end the hold first: a
# holder that reads its token after a pause is told the lease ran out.
m "lock context: FenceOf leaves an overdue hold standing" hold.go \
  '		if a.fenced {
			a.overdue()
			return Fence{' \
  '		if a.fenced {
			return Fence{' \
  . '^(TestResumedHolderSeesItsLeaseOver)$'
# A permit that ran out when its context was looked at, before its timer,
# is reported as expired, not as rejected by Redis.
m "permit context: an overdue permit reported as rejected" permit_semaphore.go \
  '		go p.finish(cause, true, false)' \
  '		go p.finish(cause, false, false)' \
  . '^(TestResumedHolderSeesItsLeaseOver)$'
# A Mutex's attempt is one script Run, which the transport can leave on
# the wire: the kind declares it (oneRun), and the engine names no kind.
m "kind: the Mutex no longer declares oneRun" mutex.go \
  'func (k *mutexKind) oneRun() {}' \
  'func (k *mutexKind) oneRunNot() {}' \
  . '^(TestLockLeavesItsScriptOnTheWire)$'

# A re-entry whose token counter was lost (deleted, or set back by a
# failover) takes a token above its owner's, not the counter as it is
# (issue 35): the owner's next fenced write would carry 0, or be refused.
m "fence: a re-entry takes the lost counter as it is" internal/scripts/fence.lua \
  "  if current < last then
    redis.call('set', counter, last)" \
  "  if false then
    redis.call('set', counter, last)" \
  . '^(TestReentryTokenAfterLostCounter)$'
m "fence: a read re-entry ignores the owner's token" internal/scripts/rw_read_acquire.lua \
  "    counterAt(KEYS[3], tonumber(ARGV[4]))" \
  "    counterAt(KEYS[3], 0)" \
  . '^(TestReentryTokenAfterLostCounter)$'
# An unfenced re-entry ("-3") takes no token: it must not create the
# counter (issue 36 item 13).
m "fence: an unfenced re-entry takes a token" internal/scripts/fence.lua \
  "  return n ~= -1 and n ~= -3" \
  "  return n ~= -1" \
  . '^(TestUnfencedReentryMakesNoCounter)$'
# An observer whose subscription was refused has no pushed changes: it
# polls the record every third of its watchdog timeout, or a Proclaim
# reaches it only at the record's expiry, a lease later.
m "election: refused observer rereads only at the record's expiry" election.go \
  '				next = min(next, e.pollEvery())' \
  '				_ = next' \
  . '^(TestElectionRefusedObserverPolls)$'
# An observer that reported "no leader" does not report it again for the
# late end of a leadership it never saw (the end's token is newer).
m "election: a late end reports no leader twice" election.go \
  'if info.Owner == "" && !o.leading {' \
  'if false && info.Owner == "" && !o.leading {' \
  . '^(TestElectionNoLeaderOnce)$'
# --wait bounds the first campaign only: a recampaign after a loss that
# kept it would give up (exit 3) instead of campaigning again.
m "elect: a recampaign keeps --wait" cmd/dlock/cmd_elect.go \
  'start, a.wait = time.Now(), optDuration{}' \
  'start = time.Now()' \
  ./cmd/dlock '^(TestElectRecampaignWaitsAgain)$'
# A write hold's field is "<owner>:write": read as an owner of its own,
# nobody waits for it, and a cycle on RWMutex write locks goes unseen.
m "deadlock: a write hold's owner not recognised" deadlock.go \
  'owners = append(owners, strings.TrimSuffix(f, layout.WriteSuffix))' \
  'owners = append(owners, f)' \
  . '^(TestDeadlockWriteLocks)$'
# A cycle is acted on when two checks in a row find it: at its first
# sighting it may be a wait that has just ended, its record not yet gone.
m "deadlock: a cycle acted on at its first sighting" deadlock.go \
  'if found && w.suspect {' \
  'if found {' \
  . '^(TestDeadlockConfirmedBeforeActing)$'
# dlock deadlocks --json names each process's label (WithClientName).
m "deadlocks: --json without the label" cmd/dlock/cmd_deadlocks.go \
  'Program: w.Holder.Program, Label: w.Holder.Name})' \
  'Program: w.Holder.Program})' \
  ./cmd/dlock '^TestDeadlocks$'
# A FencedSet ttl under a millisecond is rounded up to 1 ms: truncated to
# 0 it would write a value with no expiry, which outlives every holder.
m "fence: a sub-millisecond ttl writes a key that never expires" fence.go \
  '	if ttl > 0 && ms == 0 {
		ms = 1
	}
' \
  '' \
  . '^(TestFencedSetSubMillisecondTTL)$'
# dlocktest's FastForward runs leases out on the embedded server: the
# keys' TTLs shrink, and a holder's watchdog then finds its lock gone.
m "kit: FastForward moves no TTL" dlocktest/dlocktest.go \
  's.mr.FastForward(d)' \
  's.mr.FastForward(0)' \
  ./dlocktest '^(TestTakeWaitLose)$'
# ...and TIME with them, so that what scripts date by TIME (a permit's
# lease) runs out too.
m "kit: FastForward leaves TIME behind" dlocktest/dlocktest.go \
  's.ahead.Add(int64(d))' \
  's.ahead.Add(0)' \
  ./dlocktest '^(TestFastForwardMovesTime)$'
# Keys expire in real time on the embedded server, as on Redis, not only
# on FastForward (miniredis's default).
m "kit: keys expire only on FastForward" dlocktest/dlocktest.go \
  'mr.ClockTTL(true)' \
  'mr.ClockTTL(false)' \
  ./dlocktest '^(TestLeaseRunsOutInRealTime)$'
# What the embedded server cannot honour fails at once, naming the
# limitation: WAIT (WithReplicaSync), a cluster client.
m "kit: WAIT answered with 0 replicas" dlocktest/dlocktest.go \
  '"WAIT":         "' \
  '"WAITX":        "' \
  ./dlocktest '^(TestUnsupported)$'
m "kit: a one-node cluster faked" dlocktest/dlocktest.go \
  '"CLUSTER":      "' \
  '"CLUSTERX":     "' \
  ./dlocktest '^(TestUnsupported)$'
# No sharded subscription exists there: PUBSUB SHARD* answer "none", as
# the contract suite's checks of subscribers need.
m "kit: sharded pub/sub counts refused" dlocktest/dlocktest.go \
  'case "SHARDCHANNELS":' \
  'case "SHARDCHANNELS-":' \
  ./dlocktest '^TestContract$/^Embedded$/^Mutex$/^Reentrancy$'
# Stop cuts the server off (ErrUnreachable), and Restart brings back the
# kit's server, hook included.
m "kit: Stop leaves the server up" dlocktest/dlocktest.go \
  's.stopped = true
	s.shut()' \
  's.stopped = true' \
  ./dlocktest '^(TestOutage)$'
m "kit: Restart opens another address" dlocktest/dlocktest.go \
  'if err := s.open(s.opt.Addr); err != nil {' \
  'if err := s.open("127.0.0.1:0"); err != nil {' \
  ./dlocktest '^(TestOutage)$'
# On a real server (DLOCK_TEST_REDIS_URL) the time-travel helpers skip
# the test, saying so.
m "kit: helpers run on a real server" dlocktest/dlocktest.go \
  'func (s *Server) embeddedOnly(helper string) {
	if s.mr == nil {' \
  'func (s *Server) embeddedOnly(helper string) {
	if s.mr == nil && false {' \
  ./dlocktest '^(TestRealServer)$'
# The contract suite skips, with the reason, the tests a deployment
# cannot run (MissedNotice on the embedded server: no CLIENT KILL).
m "contract: Skip ignored" internal/contract/contract.go \
  'if why, ok := topo.Skip[c.name]; ok {' \
  'if why, ok := topo.Skip[c.name]; ok && false {' \
  ./dlocktest '^TestContract$/^Embedded$/^Mutex$/^MissedNotice$'
# dlock demo without redis-server on PATH runs on the embedded server...
m "demo: no embedded fallback" cmd/dlock/cmd_demo.go \
  'if errors.Is(err, redisserver.ErrNotFound) {' \
  'if false && errors.Is(err, redisserver.ErrNotFound) {' \
  ./cmd/dlock '^(TestDemoEmbedded)$'
# ...whose keys expire in real time: the crashed job's lock runs out.
m "demo: embedded keys never expire" cmd/dlock/demo_embedded.go \
  'm.ClockTTL(true)' \
  'm.ClockTTL(false)' \
  ./cmd/dlock '^(TestDemoEmbedded)$'

# dlock list reads locks in batches: each lock's replies are its own.
m "list: a batch decodes one lock's replies for all" cmd/dlock/inspect.go \
  'st, err := cmds[i].decode(ctx, rdb, name)' \
  'st, err := cmds[i*0].decode(ctx, rdb, name)' \
  ./cmd/dlock '^(TestListGolden)$'
# dlock ui is read-only unless started with --allow-writes...
m "ui: writes allowed without --allow-writes" cmd/dlock/ui_http.go \
  'if !u.writes {' \
  'if false {' \
  ./cmd/dlock '^(TestUIWritesRefused|TestUIClearQueue)$'
# ...and then a write needs the token printed at start...
m "ui: a write without the token" cmd/dlock/ui_http.go \
  'if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(u.token)) != 1 {' \
  'if got == "" && subtle.ConstantTimeCompare([]byte(got), []byte(u.token)) != 1 {' \
  ./cmd/dlock '^(TestUIWritesRefused)$'
# ...from the page itself: not a cross-site request...
m "ui: a cross-site write" cmd/dlock/ui_http.go \
  'if err := u.cop.Check(r); err != nil {' \
  'if err := u.cop.Check(r); false && err != nil {' \
  ./cmd/dlock '^(TestUIWritesRefused)$'
# ...nor one whose Origin is another site's.
m "ui: another origin's write" cmd/dlock/ui_http.go \
  'if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {' \
  'if o := r.Header.Get("Origin"); false && o != "http://"+r.Host {' \
  ./cmd/dlock '^(TestUIWritesRefused)$'
# dlock ui binds loopback unless --listen says otherwise...
m "ui: listens beyond loopback by default" cmd/dlock/cmd_ui.go \
  'const defaultUIListen = "127.0.0.1:7070"' \
  'const defaultUIListen = ":7070"' \
  ./cmd/dlock '^(TestUILoopbackByDefault)$'
# ...and refuses a Host that a DNS rebinding page would send.
m "ui: a rebound Host served" cmd/dlock/ui_http.go \
  'if !u.allowedHost(r.Host) {' \
  'if false {' \
  ./cmd/dlock '^(TestUILoopbackByDefault|TestUIHostCheck)$'
# The page shows the Redis URL with its password masked.
m "ui: the Redis URL shown unmasked" cmd/dlock/connect.go \
  'm.User = url.UserPassword(m.User.Username(), masked)' \
  'm.User = u.User' \
  ./cmd/dlock '^(TestUINoPassword)$'
# Every sample reaches every viewer's event stream.
m "ui: samples not pushed" cmd/dlock/ui_sampler.go \
  'close(u.changed)' \
  '_ = u.changed' \
  ./cmd/dlock '^(TestUIEventsPush)$'
# The charts infer nothing from the first sample: its holds began before.
m "ui: the first sample's holders counted" cmd/dlock/ui_history.go \
  'if n > 0 && h.samples > 0 {' \
  'if n > 0 {' \
  ./cmd/dlock '^(TestUIHistoryInfers)$'
# A new fencing token under the same holder is an acquisition...
m "ui: a re-acquisition under the same holder missed" cmd/dlock/ui_history.go \
  'ok && old != *st.Token && n == 0 {' \
  'ok && old != *st.Token && n == 0 && false {' \
  ./cmd/dlock '^(TestUIHistoryInfers)$'
# ...and a waiter queued before the first sample has no known start.
m "ui: a wait of unknown start measured" cmd/dlock/ui_history.go \
  'if _, ok := queued[k]; !ok && !t.Equal(h.first) {' \
  'if _, ok := queued[k]; !ok {' \
  ./cmd/dlock '^(TestUIHistoryInfers)$'
# The deadlock graph escapes lock names, which anyone may write.
m "ui: lock names unescaped in the graph" cmd/dlock/ui_svg.go \
  'waits for %s</text>`, mx, my+bend*1.45+4, html.EscapeString(shorten(lock)))' \
  'waits for %s</text>`, mx, my+bend*1.45+4, shorten(lock))' \
  ./cmd/dlock '^(TestUIDeadlockSVG)$'
# The fair-queue, read-write and semaphore panels, and the cards, are of
# every matching lock, not of the first uiMaxRows an update carries.
m "ui: panels and cards of the capped rows only" cmd/dlock/ui_http.go \
  '	v.count(st.Locks)
	st.Locks = st.Locks[:min(len(st.Locks), uiMaxRows)]' \
  '	st.Locks = st.Locks[:min(len(st.Locks), uiMaxRows)]
	v.count(st.Locks)' \
  ./cmd/dlock '^(TestUIPanelsBeyondRowCap)$'
# Each panel has a cap of its own.
m "ui: a panel's rows uncapped" cmd/dlock/ui_http.go \
  'if len(p.Rows) < uiMaxPanelRows {' \
  'if true {' \
  ./cmd/dlock '^(TestUIPanelOf)$'
# Beyond loopback, a Host that is a name must still be one of the allowed.
m "ui: any Host served beyond loopback" cmd/dlock/ui_http.go \
  '|| slices.Contains(u.hosts, host)' \
  '|| slices.Contains(u.hosts, host) || len(u.hosts) > 0' \
  ./cmd/dlock '^(TestUIHostCheck)$'
# The machine's hostname is allowed only when listening beyond loopback.
m "ui: the hostname allowed on loopback" cmd/dlock/cmd_ui.go \
  'err == nil && !isLoopback(addr) {' \
  'err == nil {' \
  ./cmd/dlock '^(TestUIHostCheck)$'
# A viewer that stops reading loses its stream at the write timeout...
m "ui: no write deadline on events" cmd/dlock/ui_http.go \
  'if err := rc.SetWriteDeadline(time.Now().Add(u.writeTimeout)); err != nil {' \
  'if err := rc.SetWriteDeadline(time.Time{}); err != nil {' \
  ./cmd/dlock '^(TestUIEventsStalledViewer)$'
# ...and at once when the console stops; so does any response.
m "ui: a stalled stream holds up the stop" cmd/dlock/ui_http.go \
  'func() { _ = rc.SetWriteDeadline(time.Now()) }' \
  'func() {}' \
  ./cmd/dlock '^(TestUIEventsStalledViewer|TestUIStateStalledClient)$'
# A client that stops reading /api/state loses it at the write timeout.
m "ui: no write deadline on a response" cmd/dlock/ui_http.go \
  '_ = rc.SetWriteDeadline(time.Now().Add(u.writeTimeout))' \
  '_ = rc.SetWriteDeadline(time.Time{})' \
  ./cmd/dlock '^(TestUIStateStalledClient)$'

# copy makes a scratch copy of the working tree (without .git) in $1.
copy() {
  mkdir -p "$1"
  (cd "$root" && tar --exclude=./.git -cf - .) | tar -xf - -C "$1"
}

# ---- the runner ----------------------------------------------------------
#
# A mutation is built once: go test -c makes its package's test binary
# with the mutation applied, and the binary runs only the named tests, from
# the package's directory. A slot (MUTATE_JOBS of them, default 4) owns a
# copy of the tree and takes the next mutation when its last one ends; the
# results print in list order at the end. Compiling is what the CPUs do
# (a mutant's build takes 6-7 CPU-seconds, its tests mostly wait on Redis
# and timers), so at most MUTATE_BUILDS slots (default: the CPUs) compile
# at once, and the other slots' tests run beside them: on two cores, four
# slots with two builds took the full list from 40 to under 30 minutes.

# -vet=off: vet is make lint's job, not a mutant's. -trimpath keeps the
# trees' paths (fresh temporary directories) out of go's cache keys, so
# that the slots, the baseline and earlier runs share every package a
# mutation leaves unchanged, and a mutant recompiles only its own package
# and those that import it. No DWARF (-dwarf=false, -w): a mutant is
# never debugged, and its compile takes a sixth less CPU (measured: 6.1
# against 7.1 CPU-seconds for the root package); stack traces do not need
# it. The first build with these flags recompiles the dependencies once.
buildflags=(-vet=off -trimpath -gcflags=all=-dwarf=false -ldflags=-w)
# The flags go test would give the binary: -test.paniconexit0 makes a test
# that exits the process early fail instead of looking like a pass.
runflags=(-test.count=1 -test.v -test.timeout 10m -test.paniconexit0)

usage() {
  echo "usage: scripts/mutate.sh [--base REF] [NAME-FILTER] | --check" >&2
  exit 2
}

# count prints how many times the text $2 occurs in the file $1.
count() {
  FROM="$2" perl -0ne 'BEGIN{$n=0} $n += () = /\Q$ENV{FROM}\E/g; END{print $n}' "$1"
}

# pkgdir prints the directory of the package $2 in the tree $1: where its
# test binary runs, so that testdata/ and other relative paths resolve.
pkgdir() {
  if [[ $2 == . ]]; then echo "$1"; else echo "$1/${2#./}"; fi
}

# build compiles the test binary of the package $2 in the tree $1 into $3;
# the go command's output goes to $4. A package that is a module of its own
# (./dlockotel) is built from inside it. It first takes one of the
# MUTATE_BUILDS build locks (build_lock), held until the compile ends.
build() {
  local dir=$1 pkg=$2
  if [[ $pkg != . && -f $dir/$pkg/go.mod ]]; then
    dir=$dir/$pkg pkg=.
  fi
  rm -f "$3"
  # GOGC=400: the compiler collects less often, a fifth less CPU for the
  # root package's test binary (at most 650 MB resident instead of 550 MB;
  # the tests themselves run with the default).
  (
    build_lock
    cd "$dir" && GOGC=400 $GO test -c "${buildflags[@]}" -o "$3" "$pkg"
  ) >"$4" 2>&1 && [[ -x $3 ]]
}

# build_lock takes the first build lock to be free, trying each in turn
# (waiting a fifth of a second on each), and keeps it on a descriptor of
# the calling (sub)shell: it is released when that shell exits.
build_lock() {
  local b=0 wait=0 fd
  while :; do
    exec {fd}>"$work/build$b.lock"
    flock -w "$wait" "$fd" && return
    exec {fd}>&-
    b=$(((b + 1) % builds))
    ((b == 0)) && wait=0.2
  done
}

# runbin runs the tests of the test binary $3 (package $2 of the tree $1)
# that match $4; the output goes to $5. It succeeds when they all pass.
runbin() {
  (cd "$(pkgdir "$1" "$2")" && "$3" -test.run "$4" "${runflags[@]}") >"$5" 2>&1
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

# ---- the pool: MUTATE_JOBS slots, each running one job at a time ----------

declare -A slot_of=() # the pid of a running job -> its slot
free=()               # the slots without a job

# spawn runs "$@ SLOT" in the background on a free slot, first waiting for
# a job to end when every slot is busy.
spawn() {
  ((${#free[@]})) || reap
  local s=${free[0]}
  free=("${free[@]:1}")
  "$@" "$s" &
  slot_of[$!]=$s
}

# reap waits for one job to end and frees its slot; it stops the whole
# run if the job was a failed run of the baseline.
reap() {
  local pid
  wait -n -p pid
  free+=("${slot_of[$pid]}")
  unset "slot_of[$pid]"
  baseline_check
}

# drain waits for every running job.
drain() {
  while ((${#slot_of[@]})); do reap; done
}

# kill_tree kills the process $1 and its descendants (a test binary takes
# its redis-servers along: they die with it, by Pdeathsig).
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null
}

# cleanup stops the jobs still running (after ^C, or an early exit) and
# removes the trees.
cleanup() {
  local pid
  for pid in "${!slot_of[@]}"; do kill_tree "$pid"; done
  wait 2>/dev/null
  rm -rf "$work"
}

# ---- which mutations ------------------------------------------------------

# select_mutations sets sel to the indices of the mutations to run: those
# whose name contains $filter and, with --base, whose file differs from
# $base's (committed since, changed in the working tree, or new).
select_mutations() {
  local -A changed=()
  local f k
  if [[ -n $base ]]; then
    if ! git -C "$root" rev-parse -q --verify "$base^{commit}" >/dev/null; then
      echo "mutate: --base $base: no such commit" >&2
      exit 2
    fi
    while IFS= read -r f; do
      changed[$f]=1
    done < <(git -C "$root" diff --name-only "$base" -- && git -C "$root" ls-files --others --exclude-standard)
  fi
  sel=()
  for k in "${!m_name[@]}"; do
    [[ -z $filter || ${m_name[k]} == *$filter* ]] || continue
    [[ -z $base || -n ${changed[${m_file[k]}]:-} ]] || continue
    sel+=("$k")
  done
}

# check_applies tells whether every selected mutation still applies (its
# text is found exactly once), without running any test.
check_applies() {
  local k n status=0
  for k in "${sel[@]}"; do
    n=$(count "$root/${m_file[k]}" "${m_from[k]}")
    if [[ $n != 1 ]]; then
      echo "NOT APPLIED (found $n times): ${m_name[k]} (${m_file[k]})"
      status=1
    fi
  done
  echo "${#sel[@]} mutations checked"
  exit $status
}

# ---- the baseline -----------------------------------------------------------
#
# The named tests of the selected mutations must pass on the unmutated
# tree, or a failure under a mutation says nothing. The baseline has a
# tree of its own, never mutated, so that its runs share the pool with the
# first mutations: a slot does not sit idle while the other ends the
# baseline's longest run (verify's TestSmoke takes two minutes). A failed
# run stops the whole run at the next job's end.

declare -A base_names=() # package -> the plain test names the list gives it
base_runs=0              # how many runs the baseline makes

# testname prints the file name go test gives the test binary of the
# package $1 (dlock.test, pubsub.test): the tests see it as their program
# name (a golden file shows it).
testname() {
  local p=${1#./}
  [[ $p != . ]] || p=dlock
  echo "${p##*/}.test"
}

# binname prints the path of the unmutated test binary of the package $1.
binname() {
  local p=${1#./}
  [[ $p != . ]] || p=root
  mkdir -p "$work/base/bin/${p//\//_}"
  echo "$work/base/bin/${p//\//_}/$(testname "$1")"
}

# base_build builds the unmutated test binary of the package $1.
base_build() {
  build "$work/base/tree" "$1" "$(binname "$1")" "$(binname "$1").log"
  echo $? >"$(binname "$1").rc"
}

# base_run runs the tests of the package $1 matching $2 on the unmutated
# tree, as the baseline's run number $3: its output goes to run$3.out, and
# run$3.failed says why when the tests fail or none ran.
base_run() {
  local out=$work/base/run$3.out
  if ! runbin "$work/base/tree" "$1" "$(binname "$1")" "$2" "$out" || ! ran "$out" "$2"; then
    {
      echo "baseline: the tests fail, or none ran, on the unmutated tree: $1 $2"
      tail -40 "$out"
    } >"$work/base/run$3.failed"
  fi
  echo "$EPOCHSECONDS" >"$work/base/run$3.end"
  echo "baseline $3/$base_runs: $1 $(cut -c1-70 <<<"$2") ($(grep -cE -- '^--- (PASS|SKIP): ' "$out") tests)"
}

# baseline_check exits 1 if a baseline run failed.
baseline_check() {
  local f
  for f in "$work"/base/run*.failed; do
    [[ -e $f ]] || continue
    cat "$f"
    exit 1
  done
}

# baseline builds each package's test binary once, then starts its runs
# in the pool without waiting for them: a package's plain names
# ('^(TestA|TestB)$') are dealt round-robin into MUTATE_JOBS runs, and a
# subtest pattern runs on its own. It sets base_names and base_runs.
baseline() {
  local -A pats=()
  local k pkg pattern n c
  local -a names alts chunk plist runs=()
  base_names=()
  copy "$work/base/tree"
  for k in "${sel[@]}"; do
    pats[${m_pkg[k]}]+=" ${m_tests[k]}"
  done
  for pkg in "${!pats[@]}"; do spawn base_build "$pkg"; done
  drain
  for pkg in "${!pats[@]}"; do
    if [[ $(cat "$(binname "$pkg").rc") != 0 ]]; then
      echo "baseline: $pkg does not build:"
      tail -40 "$(binname "$pkg").log"
      exit 1
    fi
    names=()
    read -ra plist <<<"${pats[$pkg]}" # read, unlike an unquoted $x, does not glob
    mapfile -t plist < <(printf '%s\n' "${plist[@]}" | sort -u)
    for pattern in "${plist[@]}"; do
      if [[ $pattern =~ ^\^\(([A-Za-z0-9_|]+)\)\$$ ]]; then
        IFS='|' read -ra alts <<<"${BASH_REMATCH[1]}"
        names+=("${alts[@]}")
      else
        runs+=("$pkg $pattern")
      fi
    done
    mapfile -t names < <(printf '%s\n' "${names[@]}" | sort -u | grep .)
    base_names[$pkg]="${names[*]}"
    for ((c = 0; c < jobs && c < ${#names[@]}; c++)); do
      chunk=()
      for ((n = c; n < ${#names[@]}; n += jobs)); do chunk+=("${names[n]}"); done
      runs+=("$pkg ^($(IFS='|' && echo "${chunk[*]}"))\$")
    done
  done
  base_runs=${#runs[@]}
  for n in "${!runs[@]}"; do
    read -r pkg pattern <<<"${runs[n]}"
    echo "$pkg" >"$work/base/run$((n + 1)).pkg"
    spawn base_run "$pkg" "$pattern" "$((n + 1))"
  done
}

# baseline_ran exits 1 if a name of the list ran in none of its package's
# baseline runs (a run checks only that some test ran), and sets based to
# the time the baseline's last run ended.
baseline_ran() {
  local pkg n
  for pkg in "${!base_names[@]}"; do
    for n in ${base_names[$pkg]}; do
      if ! grep -qE -- "--- (PASS|SKIP): $n " $(grep -lx -- "$pkg" "$work"/base/run*.pkg | sed 's/\.pkg$/.out/'); then
        echo "baseline: no test $n ran in $pkg (fix the list)"
        exit 1
      fi
    done
  done
  based=$(cat "$work"/base/run*.end | sort -n | tail -1)
}

# ---- the mutations ----------------------------------------------------------

# mutate applies the mutation $2 to the tree of the slot $3, builds its
# package's test binary, runs the named tests and puts the tree back. The
# verdict goes to $work/res/$1: status (1 for a failure of the run),
# seconds building, seconds testing, and the result column of the table.
mutate() {
  local i=$1 k=$2 slot=$3
  local tree=$work/t$slot file=${m_file[k]} pkg=${m_pkg[k]} tests=${m_tests[k]}
  local bin=$work/m$slot/$(testname "$pkg") out=$work/m$slot.out log=$work/m$slot.log
  mkdir -p "$work/m$slot"
  local n rc t0 t1 t2 status=1 result
  n=$(count "$tree/$file" "${m_from[k]}")
  t0=$EPOCHSECONDS t1=$EPOCHSECONDS t2=$EPOCHSECONDS
  if [[ $n != 1 ]]; then
    result="NOT APPLIED (found $n times)"
  else
    cp "$tree/$file" "$work/original$slot"
    FROM="${m_from[k]}" TO="${m_to[k]}" perl -0pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$tree/$file"
    if ! build "$tree" "$pkg" "$bin" "$log"; then
      t1=$EPOCHSECONDS t2=$t1
      # A build failure is no catch: the mutation must compile.
      result="BROKEN (does not build: $(grep -m1 -vE '^(#|FAIL|ok)' "$log" | cut -c1-80))"
    else
      t1=$EPOCHSECONDS
      # The tree keeps the mutation while the tests run: cmd/dlock's
      # TestMain builds the dlock command from it.
      runbin "$tree" "$pkg" "$bin" "$tests" "$out"
      rc=$? t2=$EPOCHSECONDS
      result=$(verdict "$rc" "$out" "$tests") && status=0
    fi
    # The next mutation on this slot starts from the tree as it is.
    cp "$work/original$slot" "$tree/$file"
  fi
  printf '%s\t%s\t%s\t%s\n' "$status" $((t1 - t0)) $((t2 - t1)) "$result" >"$work/res/$i"
  echo "[$i/${#sel[@]}] ${m_name[k]}: $result ($((t1 - t0))+$((t2 - t1)) s)"
}

# verdict prints what the run of the named tests $3 (exit code $1, output
# $2) says of a mutation, and fails unless the mutation was caught.
verdict() {
  local rc=$1 out=$2 tests=$3
  if ((rc == 0)); then
    if ! ran "$out" "$tests"; then
      echo "NO TEST RAN (fix the list)"
    else
      echo "**SURVIVED**"
    fi
    return 1
  elif grep -q -- '--- FAIL' "$out"; then
    echo "caught by $(failed "$out")"
  elif grep -qE '^(panic|fatal error): ' "$out"; then
    echo "caught: $(grep -m1 -E '^(panic|fatal error): ' "$out" | cut -c1-60)"
  else
    # The binary failed, but no test did (TestMain could not start its
    # servers, say): that says nothing of the mutation.
    echo "NO TEST FAILED (exit $rc: $(grep -m1 -vE '^(=== |--- |PASS|FAIL|ok)' "$out" | cut -c1-80))"
    return 1
  fi
}

# ---- main -------------------------------------------------------------------

check=0 base= filter=
while (($#)); do
  case $1 in
  --check) check=1 ;;
  --base) (($# > 1)) || usage; base=$2; shift ;;
  --base=*) base=${1#--base=} ;;
  -*) usage ;;
  *) [[ -z $filter ]] || usage; filter=$1 ;;
  esac
  shift
done
select_mutations
((check)) && check_applies
if ((${#sel[@]} == 0)); then
  echo "no mutation selected${base:+ (none of the files changed since $base)}${filter:+ (filter: $filter)}"
  exit 0
fi

jobs=${MUTATE_JOBS:-4}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "MUTATE_JOBS=$jobs: not a positive number" >&2; exit 2; }
builds=${MUTATE_BUILDS:-$(nproc)}
[[ $builds =~ ^[1-9][0-9]*$ ]] || { echo "MUTATE_BUILDS=$builds: not a positive number" >&2; exit 2; }
work=${MUTATE_DIR:-$(mktemp -d /tmp/dlock-mutate.XXXXXX)}
mkdir -p "$work" && work=$(cd "$work" && pwd) # test binaries need absolute paths
trap cleanup EXIT
trap 'exit 130' INT TERM
for ((s = 1; s <= jobs; s++)); do
  copy "$work/t$s"
  free+=("$s")
done
mkdir -p "$work/res"

start=$EPOCHSECONDS
echo "${#sel[@]} mutations, $jobs at a time ($builds compiling); first the baseline: their tests on the unmutated tree"
baseline
i=0
for k in "${sel[@]}"; do
  i=$((i + 1))
  spawn mutate "$i" "$k"
done
drain
baseline_ran
status=0
echo
echo "| mutation | file | tests that must catch it | result | build s | test s |"
echo "|---|---|---|---|---:|---:|"
i=0
for k in "${sel[@]}"; do
  i=$((i + 1))
  IFS=$'\t' read -r st build_s test_s result <"$work/res/$i"
  ((st)) && status=1
  echo "| ${m_name[k]} | \`${m_file[k]}\` | \`${m_tests[k]}\` | $result | $build_s | $test_s |"
done
end=$EPOCHSECONDS
echo
echo "${#sel[@]} mutations, $jobs at a time ($builds compiling): the baseline ended after $((based - start)) s, the whole run after $(((end - start) / 60)) min $(((end - start) % 60)) s"
exit $status
}
