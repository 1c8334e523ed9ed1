#!/usr/bin/env bash
# Start the stores Notee needs on this machine, unless the environment points Notee elsewhere:
# NOTEE_MYSQL_URL set     -> no local MariaDB is started (the user's MySQL is used)
# NOTEE_CASSANDRA_HOSTS set -> no local Cassandra is started (the user's cluster is used)
# Idempotent: servers already running are reused. `services/down.sh` stops what this started.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "${NOTEE_MYSQL_URL:-}" ]; then "$HERE/mariadb/server.sh" start &
else echo "NOTEE_MYSQL_URL is set: using that MySQL, no local server"; fi
if [ -z "${NOTEE_CASSANDRA_HOSTS:-}" ]; then "$HERE/cassandra/node.sh" start &
else echo "NOTEE_CASSANDRA_HOSTS is set: using that cluster, no local server"; fi
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
exit $status
