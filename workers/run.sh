#!/usr/bin/env bash
# Run the Notee processes of workers/Procfile in the foreground (called by `make run` after the
# stores are up and migrated). For a local run it makes, once, a dev admin token and a credentials
# key under .run/ unless NOTEE_ADMIN_TOKEN / NOTEE_CREDENTIALS_KEY are already set.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .run && chmod 700 .run
if [ -z "${NOTEE_ADMIN_TOKEN:-}" ]; then
  [ -s .run/admin-token ] || .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))' > .run/admin-token
  export NOTEE_ADMIN_TOKEN=$(cat .run/admin-token)
  echo "admin token (dev): see .run/admin-token"
fi
if [ -z "${NOTEE_CREDENTIALS_KEY:-}" ]; then
  [ -s .run/credentials.key ] || .venv/bin/python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())' > .run/credentials.key
  export NOTEE_CREDENTIALS_KEY=$(cat .run/credentials.key)
fi
exec .venv/bin/honcho -f workers/Procfile -d . -e /dev/null start
