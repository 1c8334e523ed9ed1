#!/usr/bin/env bash
# Start, stop or check one local Apache Cassandra 5.0 node, run with `java` from the cassandra-all
# jars on Maven Central (no Docker, no tarball).
#
#   node.sh start [N [SIZE]]   start node N of a SIZE-node cluster (default: 1 of 1) and wait for CQL
#   node.sh stop  [N [SIZE]]   SIGTERM, then SIGKILL after 30 s
#   node.sh kill  [N [SIZE]]   SIGKILL at once (fault tests)
#   node.sh status [N [SIZE]]  exit 0 when the node answers CQL
#
# A single node listens on 127.0.0.1:9042 (storage 7000). A SIZE>1 cluster uses 127.0.0.N with
# CQL port 9043 and storage port 7001, so it can run beside the single node. Start is idempotent:
# a node that already answers is reused. Data lives in $NOTEE_RUN_DIR (default: <repo>/.run).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LIB=$HERE/lib
RUN_ROOT=${NOTEE_RUN_DIR:-$REPO/.run}

cmd=${1:-start}; N=${2:-1}; SIZE=${3:-1}
if [ "$SIZE" -eq 1 ]; then
  ADDRESS=127.0.0.1; CQL_PORT=9042; STORAGE_PORT=7000; RUN=$RUN_ROOT/cassandra; HINTS=false
else
  ADDRESS=127.0.0.$N; CQL_PORT=9043; STORAGE_PORT=7001; RUN=$RUN_ROOT/cassandra-cluster/node$N; HINTS=true
fi
PIDFILE=$RUN/cassandra.pid

answers() { (exec 3<>"/dev/tcp/$ADDRESS/$CQL_PORT") 2>/dev/null; }
running_pid() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && cat "$PIDFILE"; }

find_java() {
  # Cassandra 5.0 calls System.setSecurityManager at start: JDK 17 only warns, JDK 24+ refuses.
  for j in "${CASSANDRA_JAVA:-}" /usr/lib/jvm/java-17-openjdk-amd64/bin/java /usr/lib/jvm/java-17-openjdk/bin/java; do
    [ -n "$j" ] && [ -x "$j" ] && { echo "$j"; return; }
  done
  command -v java || { echo "node.sh: no JDK 17 found (set CASSANDRA_JAVA)" >&2; exit 1; }
}

resolve_jars() {
  # Maven keeps its own cache (~/.m2); lib/ is a copy, re-made only when the server jar is missing.
  [ -f "$LIB/cassandra-all-5.0.8.jar" ] && return
  echo "node.sh: resolving Cassandra server jars from Maven Central into $LIB" >&2
  mvn -B -q -f "$HERE/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$LIB"
}

token_for() {  # evenly spaced Murmur3 tokens: -2^63 + i * 2^64 / SIZE
  python3 -c "import sys; n,s=int(sys.argv[1]),int(sys.argv[2]); print(0 if s==1 else -2**63 + (n-1)*(2**64//s))" "$1" "$2"
}

start() {
  if answers; then echo "cassandra node $N ($ADDRESS:$CQL_PORT) already running"; return; fi
  if pid=$(running_pid); then :; else
    resolve_jars
    mkdir -p "$RUN/data" "$RUN/logs"
    sed -e "s|@INITIAL_TOKEN@|$(token_for "$N" "$SIZE")|" -e "s|@SEEDS@|127.0.0.1:$STORAGE_PORT|" \
        -e "s|@ADDRESS@|$ADDRESS|g" -e "s|@CQL_PORT@|$CQL_PORT|" -e "s|@DATA@|$RUN/data|g" \
        -e "s|@HINTS@|$HINTS|" -e "s|^storage_port: .*|storage_port: $STORAGE_PORT|" \
        "$HERE/cassandra.yaml.in" > "$RUN/cassandra.yaml"
    mapfile -t JVM_OPTS < <(grep -v '^\s*#' "$HERE/jvm.options" | grep -v '^\s*$')
    if [ "$SIZE" -gt 1 ]; then
      # Cluster nodes are killed and restarted by the fault tests: their schema must survive a
      # SIGKILL as on a real node (without durable system tables a restarted node forgets the
      # keyspaces' tables and answers INCOMPATIBLE_SCHEMA until it has pulled them again).
      mapfile -t JVM_OPTS < <(printf '%s\n' "${JVM_OPTS[@]}" | grep -v -e unsafesystem -e flush_local_schema_changes)
    fi
    JVM_OPTS+=(-Xms"${CASSANDRA_HEAP_MIN:-512M}" -Xmx"${CASSANDRA_HEAP:-1G}"
      -javaagent:"$LIB/jamm-0.4.0.jar"
      -Dcassandra.config="file://$RUN/cassandra.yaml" -Dcassandra.storagedir="$RUN/data"
      -Dcassandra.logdir="$RUN/logs" -Dlogback.configurationFile="$HERE/logback.xml")
    echo "starting cassandra node $N on $ADDRESS:$CQL_PORT (logs: $RUN/logs/stdout.log)"
    nohup "$(find_java)" "${JVM_OPTS[@]}" -cp "$HERE:$LIB/*" org.apache.cassandra.service.CassandraDaemon \
      > "$RUN/logs/stdout.log" 2>&1 < /dev/null &
    echo $! > "$PIDFILE"   # cassandra-pidfile only deletes the file; write the pid ourselves
  fi
  local t0=$SECONDS
  for _ in $(seq 1 240); do
    answers && { echo "cassandra node $N ready after $((SECONDS - t0)) s"; return; }
    running_pid >/dev/null || { tail -60 "$RUN/logs/stdout.log" >&2; echo "cassandra node $N died" >&2; exit 1; }
    sleep 1
  done
  tail -60 "$RUN/logs/stdout.log" >&2; echo "cassandra node $N not ready after 240 s" >&2; exit 1
}

stop() {
  local sig=${1:-TERM} pid
  pid=$(running_pid) || { echo "cassandra node $N not running (not started by this project)"; return; }
  kill "-$sig" "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$PIDFILE"; echo "cassandra node $N stopped"
}

case "$cmd" in
  start) start ;;
  stop) stop TERM ;;
  kill) stop KILL ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|kill|status [N [SIZE]]" >&2; exit 2 ;;
esac
