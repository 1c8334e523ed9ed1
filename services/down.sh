#!/usr/bin/env bash
# Stop the local servers that services/up.sh started (a server it did not start is left alone).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/cassandra/node.sh" stop
"$HERE/mariadb/server.sh" stop
