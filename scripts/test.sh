#!/usr/bin/env bash
# test.sh: go test -race for every module of the repository (make test),
# in lanes that run side by side.
#
#   scripts/test.sh [MODULE-DIR...]   # default: every directory with a go.mod
#
# Most tests wait: on Redis, on leases running out, on timers. The root
# package alone took 276 s of wall time for 50 s of CPU, one test after
# another, and the modules ran one after another too: about 12 minutes on
# two cores. So the root package's test binary is built once and its tests
# are dealt round-robin into ROOT_SHARDS processes (default 3), each with
# its own redis-servers (TestMain starts them); the root module's other
# packages run in one more lane, verify/'s smoke in another, and the other
# modules one after another in a last lane: about 4 minutes. A lane's
# output is printed when it ends (whole if it failed); the script fails if
# any lane failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
shards=${ROOT_SHARDS:-3}
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "ROOT_SHARDS=$shards: not a positive number" >&2; exit 2; }
flags=(-race -timeout 20m)

if (($#)); then
  modules=("$@")
else
  mapfile -t modules < <(find . -name go.mod -not -path '*/.*' -not -path '*/testdata/*' -printf '%h\n' | sort)
fi

work=$(mktemp -d /tmp/dlock-test.XXXXXX)
# Each lane runs in a process group of its own (set -m), so that an early
# exit stops its go test, test binaries and their redis-servers too.
set -m
stop_lanes() {
  local pid
  for pid in "${!lane_of[@]}"; do kill -- -"$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap stop_lanes EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -A lane_of=() # the pid of a running lane -> its name
# lane runs "$@" in the background as the lane named $1, its output into
# $work/NAME.out and its wall seconds into $work/NAME.secs.
lane() {
  local name=$1
  shift
  (
    start=$EPOCHSECONDS
    "$@" >"$work/$name.out" 2>&1
    rc=$?
    echo $((EPOCHSECONDS - start)) >"$work/$name.secs"
    exit $rc
  ) &
  lane_of[$!]=$name
}

# modules_in_turn tests the modules $@ one after another, each with go test
# ./..., and fails if any failed.
modules_in_turn() {
  local m rc=0
  for m in "$@"; do
    echo "== $m"
    (cd "$m" && $GO test "${flags[@]}" ./...) || rc=1
  done
  return $rc
}

# root_shard runs the root package's tests numbered $1 mod $shards (in the
# order -test.list gives them) from the binary $work/root.test.
root_shard() {
  local names pattern
  mapfile -t names < <(awk -v k="$1" -v n="$shards" '(NR - 1) % n == k' "$work/root.list")
  pattern="^($(IFS='|' && echo "${names[*]}"))\$"
  echo "${#names[@]} tests of $(wc -l <"$work/root.list")"
  # -test.paniconexit0: a test that exits the process early fails. -v,
  # to check below that every name of the shard ran.
  "$work/root.test" -test.run "$pattern" -test.timeout 20m -test.paniconexit0 -test.v >"$work/shard$1.v" 2>&1
  local rc=$? n
  grep -vE '^(=== |    |--- PASS)' "$work/shard$1.v"
  ((rc == 0)) || return $rc
  for n in "${names[@]}"; do
    grep -qE -- "^--- (PASS|SKIP): $n " "$work/shard$1.v" || { echo "FAIL: $n did not run"; return 1; }
  done
  echo "ok"
}

root=0 others=()
for m in "${modules[@]}"; do
  m=${m#./} m=${m%/}
  if [[ $m == . || -z $m ]]; then root=1; else others+=("./$m"); fi
done
if ((root)); then
  # The root package: one build, then its shards. The module's other
  # packages go test in a lane of their own.
  $GO test "${flags[@]}" -c -o "$work/root.test" . || exit 1
  if ! "$work/root.test" -test.list '.*' >"$work/list.out" 2>&1; then
    echo "listing the root package's tests failed:"
    cat "$work/list.out"
    exit 1
  fi
  grep -E '^(Test|Example|Fuzz)' "$work/list.out" >"$work/root.list"
  [[ -s $work/root.list ]] || { echo "the root package lists no tests"; exit 1; }
  for ((k = 0; k < shards; k++)); do
    lane "root-shard-$((k + 1))-of-$shards" root_shard "$k"
  done
  all=$($GO list ./...) && self=$($GO list .) || exit 1
  mapfile -t pkgs < <(grep -vx -- "$self" <<<"$all")
  ((${#pkgs[@]})) && lane root-module-packages $GO test "${flags[@]}" "${pkgs[@]}"
fi
# verify/'s smoke takes two minutes by itself: it gets a lane of its own,
# the other modules share one.
rest=()
for m in "${others[@]}"; do
  if [[ $m == ./verify ]]; then lane verify modules_in_turn "$m"; else rest+=("$m"); fi
done
((${#rest[@]})) && lane other-modules modules_in_turn "${rest[@]}"

status=0
while ((${#lane_of[@]})); do
  wait -n -p pid
  rc=$?
  name=${lane_of[$pid]}
  unset "lane_of[$pid]"
  echo "== $name: $( ((rc == 0)) && echo ok || echo FAILED) in $(cat "$work/$name.secs") s"
  if ((rc == 0)); then
    grep -vE '^(=== |--- PASS|PASS$)' "$work/$name.out" | grep -E '^(==|ok|\?|---|FAIL|panic)' || true
  else
    status=1
    cat "$work/$name.out"
  fi
done
exit $status
