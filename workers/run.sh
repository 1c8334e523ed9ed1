#!/usr/bin/env bash
# Run the Notee processes of workers/Procfile in the foreground (called by `make run` after the
# stores are up and migrated). For a local run it makes, once, a dev admin token and a credentials
# key under .run/ unless NOTEE_ADMIN_TOKEN / NOTEE_CREDENTIALS_KEY are already set.
#
# Pushes go to the embedded emulator (`notee emulator`, started here) unless NOTEE_EMULATOR_URL
# points elsewhere or NOTEE_LIVE_DELIVERY=1 is set: then they go to the real FCM and APNs with each
# service's own credentials. .run/env holds the variables a shell needs to follow the quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077  # .run/ holds secrets: readable by this user only
RUN=${NOTEE_RUN_DIR:-.run}
workers/dev-secrets.sh   # $RUN (700) with admin-token and credentials.key (600, also when older runs left them readable)
if [ -z "${NOTEE_ADMIN_TOKEN:-}" ]; then
  export NOTEE_ADMIN_TOKEN=$(cat "$RUN/admin-token")
fi
if [ -z "${NOTEE_CREDENTIALS_KEY:-}" ]; then
  export NOTEE_CREDENTIALS_KEY=$(cat "$RUN/credentials.key")
fi
procfile=workers/Procfile
if [ "${NOTEE_LIVE_DELIVERY:-0}" != 1 ] && [ -z "${NOTEE_EMULATOR_URL:-}" ]; then
  state=${NOTEE_EMULATOR_STATE_DIR:-$RUN/emulator}
  # The emulator's CA is made before any process starts, so the senders trust it from their first push.
  .venv/bin/python -c "import sys; from notee.emulator.tls import ensure_tls; ensure_tls(sys.argv[1])" "$state"
  export NOTEE_EMULATOR_URL="https://${NOTEE_EMULATOR_HOST:-127.0.0.1}:${NOTEE_EMULATOR_PORT:-8443}"
  export NOTEE_EMULATOR_CA_FILE="$(cd "$state" && pwd)/ca.crt" NOTEE_EMULATOR_STATE_DIR="$state"
  # No credentials needed to try Notee: services without them send to the emulator all the same.
  export NOTEE_EMULATOR_STANDIN=true
  procfile=workers/Procfile.emulator
  delivery="every push goes to the embedded emulator at $NOTEE_EMULATOR_URL (NOTEE_LIVE_DELIVERY=1: real FCM/APNs)"
elif [ -n "${NOTEE_EMULATOR_URL:-}" ]; then
  delivery="every push goes to the emulator at $NOTEE_EMULATOR_URL"
else
  delivery="LIVE: pushes go to FCM and APNs with each service's credentials"
fi
api="http://${NOTEE_API_HOST:-127.0.0.1}:${NOTEE_API_PORT:-8080}"
{
  echo "export NOTEE_URL=$api"
  echo "export NOTEE_ADMIN_TOKEN=$NOTEE_ADMIN_TOKEN"
  [ -z "${NOTEE_EMULATOR_URL:-}" ] || echo "export NOTEE_EMULATOR_URL=$NOTEE_EMULATOR_URL NOTEE_EMULATOR_CA_FILE=${NOTEE_EMULATOR_CA_FILE:-}"
  echo 'export PATH="'"$PWD"'/.venv/bin:$PATH"'
} > "$RUN/env"
cat <<MSG
Notee is starting: api, worker, scheduler$([ "$procfile" = workers/Procfile ] || echo ", emulator").
  API           $api   (OpenAPI: $api/docs, health: $api/healthz)
  console       $api/console   (sign in with the admin token, or a service's API key)
  admin token   $RUN/admin-token   (every variable a shell needs: source $RUN/env)
  delivery      $delivery
  first push    in another shell: source $RUN/env, then README.md "Quickstart", e.g.
                  notee admin service create DEMO --name Demo && notee admin service list
MSG
exec .venv/bin/honcho -f "$procfile" -d . -e /dev/null start
