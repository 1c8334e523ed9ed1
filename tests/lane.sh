#!/usr/bin/env bash
# One lane of `make test`: run the command, then print the lane's wall time and outcome, and add that
# line to the summary file (TEST_LANES, default .run/test-lanes.txt) that `make test` prints at its end.
#   tests/lane.sh <name> <command...>
set -uo pipefail
name=$1
shift
summary=${TEST_LANES:-.run/test-lanes.txt}
mkdir -p "$(dirname "$summary")"
start=$(date +%s%N)
"$@"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
line=$(printf 'lane %-20s %4d.%d s  %s  (%s)' "$name" $((ms / 1000)) $((ms % 1000 / 100)) \
  "$([ $rc -eq 0 ] && echo passed || echo "FAILED ($rc)")" "$(date '+%H:%M:%S')")
echo "$line"
echo "$line" >> "$summary"
exit $rc
