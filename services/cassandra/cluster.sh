#!/usr/bin/env bash
# A local multi-node Cassandra cluster on loopback addresses 127.0.0.1..N (CQL port 9043, storage
# port 7001), started from the same server jars as the single node and able to run beside it.
# Used by the fault suite (node loss); also a way for a user to try Notee on a real cluster:
#   services/cassandra/cluster.sh start [SIZE]    start nodes 1..SIZE (default 3), one after another, and
#                                                 wait until they form one ring (all UP, NORMAL, one schema)
#   services/cassandra/cluster.sh stop [SIZE]     stop them all
#   services/cassandra/cluster.sh kill N [SIZE]   SIGKILL node N (simulated node loss)
#   services/cassandra/cluster.sh restart N [SIZE]
# Point Notee at it with NOTEE_CASSANDRA_HOSTS=127.0.0.1,127.0.0.2,127.0.0.3 NOTEE_CASSANDRA_PORT=9043
# NOTEE_CASSANDRA_REPLICATION="{'class': 'SimpleStrategy', 'replication_factor': 3}".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-start}
case "$cmd" in
  start|stop) SIZE=${2:-3} ;;
  kill|restart) N=${2:?node number}; SIZE=${3:-3} ;;
  *) echo "usage: $0 start|stop [SIZE] | kill|restart N [SIZE]" >&2; exit 2 ;;
esac
export CASSANDRA_HEAP=${CASSANDRA_HEAP:-768M}
NOTEE=${NOTEE:-$(cd "$HERE/../.." && pwd)/.venv/bin/notee}

# A node answering CQL may still believe it is alone (gossip has not run yet). Ready means every node
# sees every other UP and NORMAL, with one schema version (`notee cassandra-ready`, notee/store/ring.py).
ring_ready() {
  [ "$SIZE" -gt 1 ] || return 0
  [ -x "$NOTEE" ] || { echo "cluster.sh: $NOTEE not found (make venv, or set NOTEE=path/to/notee)" >&2; exit 1; }
  NOTEE_CASSANDRA_HOSTS=$(seq -s, -f '127.0.0.%g' 1 "$SIZE") NOTEE_CASSANDRA_PORT=9043 \
    "$NOTEE" cassandra-ready --timeout "${RING_TIMEOUT:-300}"
}

case "$cmd" in
  start) for n in $(seq 1 "$SIZE"); do "$HERE/node.sh" start "$n" "$SIZE"; done; ring_ready ;;
  stop) for n in $(seq "$SIZE" -1 1); do "$HERE/node.sh" stop "$n" "$SIZE"; done ;;
  kill) "$HERE/node.sh" kill "$N" "$SIZE" ;;
  restart) "$HERE/node.sh" start "$N" "$SIZE"; ring_ready ;;
esac
