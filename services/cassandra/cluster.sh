#!/usr/bin/env bash
# A local multi-node Cassandra cluster on loopback addresses 127.0.0.1..N (CQL port 9043, storage
# port 7001), started from the same server jars as the single node and able to run beside it.
# Used by the fault suite (node loss); also a way for a user to try Notee on a real cluster:
#   services/cassandra/cluster.sh start [SIZE]    start nodes 1..SIZE (default 3), one after another
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
case "$cmd" in
  start) for n in $(seq 1 "$SIZE"); do "$HERE/node.sh" start "$n" "$SIZE"; done ;;
  stop) for n in $(seq "$SIZE" -1 1); do "$HERE/node.sh" stop "$n" "$SIZE"; done ;;
  kill) "$HERE/node.sh" kill "$N" "$SIZE" ;;
  restart) "$HERE/node.sh" start "$N" "$SIZE" ;;
esac
