#!/usr/bin/env bash
# Start or stop the local MariaDB (Debian's mariadb-server) that Notee uses for development,
# tests and CI. No systemd and no Docker: mariadbd is started directly, as the `mysql` user.
#
#   server.sh start   install mariadb-server if missing (apt-get), start mariadbd if nothing answers,
#                     create the `notee` user and the databases notee / notee_test. Idempotent.
#   server.sh stop    stop mariadbd, only if this script started it.
#   server.sh status  exit 0 when the server answers.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RUN=${NOTEE_RUN_DIR:-$REPO/.run}/mariadb
PORT=${NOTEE_MARIADB_PORT:-3306}
STARTED_MARK=$RUN/started-by-notee

SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
as_root() { "${SUDO[@]}" "$@"; }
alive() { mariadb-admin --protocol=tcp -h127.0.0.1 -P"$PORT" -unotee -pnotee ping >/dev/null 2>&1 \
          || as_root mariadb-admin ping >/dev/null 2>&1; }

install() {
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] && return
  echo "installing mariadb-server from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  # policy-rc.d 101: the package's postinst must not try to start a service itself.
  printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null; as_root chmod +x /usr/sbin/policy-rc.d
  as_root apt-get install -y -qq --no-install-recommends mariadb-server mariadb-client >/dev/null
  as_root rm -f /usr/sbin/policy-rc.d
}

start() {
  mkdir -p "$RUN"
  if ! alive; then
    install
    as_root install -d -o mysql -g root -m 755 /run/mysqld
    [ -d /var/lib/mysql/mysql ] || as_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db >/dev/null
    echo "starting mariadbd on 127.0.0.1:$PORT (log: $RUN/mariadb.err)"
    as_root touch "$RUN/mariadb.err"; as_root chown mysql "$RUN/mariadb.err"
    # --max-connections: every test, worker and API process keeps a small pool.
    nohup "${SUDO[@]}" /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --port="$PORT" \
      --max-connections=500 --log-error="$RUN/mariadb.err" >/dev/null 2>&1 < /dev/null &
    touch "$STARTED_MARK"
    for _ in $(seq 1 60); do alive && break; sleep 1; done
    alive || { tail -40 "$RUN/mariadb.err" >&2; echo "mariadb did not start" >&2; exit 1; }
  fi
  as_root mariadb <<'SQL'
CREATE DATABASE IF NOT EXISTS notee CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
CREATE DATABASE IF NOT EXISTS notee_test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
CREATE USER IF NOT EXISTS 'notee'@'127.0.0.1' IDENTIFIED BY 'notee';
CREATE USER IF NOT EXISTS 'notee'@'localhost' IDENTIFIED BY 'notee';
GRANT ALL PRIVILEGES ON `notee%`.* TO 'notee'@'127.0.0.1';
GRANT ALL PRIVILEGES ON `notee%`.* TO 'notee'@'localhost';
FLUSH PRIVILEGES;
SQL
  echo "mariadb ready on 127.0.0.1:$PORT"
}

stop() {
  [ -f "$STARTED_MARK" ] || { echo "mariadb was not started by this project; leaving it alone"; return; }
  as_root mariadb-admin shutdown 2>/dev/null || true
  rm -f "$STARTED_MARK"; echo "mariadb stopped"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) alive ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
