#!/usr/bin/env bash
# Lanes of `make test` that can run at the same time (they share no data and are not timed against
# each other): start each command, print each one's output as soon as it ends, and fail if any failed.
#   tests/side_by_side.sh '<command>' '<command>' ...
set -uo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
declare -A out_of=()
n=0
for cmd in "$@"; do
  n=$((n + 1))
  bash -c "$cmd" > "$dir/$n.out" 2>&1 &
  out_of[$!]="$dir/$n.out"
done
rc=0
while [ "$n" -gt 0 ]; do
  wait -n -p done "${!out_of[@]}"
  status=$?
  cat "${out_of[$done]}"
  [ "$status" -eq 0 ] || rc=$status
  unset "out_of[$done]"
  n=$((n - 1))
done
exit "$rc"
