#!/usr/bin/env bash
# Make, once, the development admin token and credentials key of a local run under $NOTEE_RUN_DIR
# (default <repo>/.run): the folder owner-only (700), each secret file owner-only (600), also when an
# older run left them readable. Production passes NOTEE_ADMIN_TOKEN / NOTEE_CREDENTIALS_KEY itself.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
RUN=${NOTEE_RUN_DIR:-$REPO/.run}
PY=${NOTEE_PYTHON:-$REPO/.venv/bin/python}
umask 077
mkdir -p "$RUN" && chmod 700 "$RUN"
[ -s "$RUN/admin-token" ] || "$PY" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$RUN/admin-token"
[ -s "$RUN/credentials.key" ] || "$PY" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())' > "$RUN/credentials.key"
chmod 600 "$RUN/admin-token" "$RUN/credentials.key"
