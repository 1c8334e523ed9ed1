"""The few MySQL reads the subscription domain needs beyond notee/store/users_sql.py and
templates_sql.py: the topic subscribe's lock and context read (one user or a thousand), the users'
devices and every live template key for `notee reconcile`, the live CYCLE templates for the cycle
calendar. Driver SQL (the hot path) and SQLAlchemy Core over their Table objects; the caller owns
the Session or Connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, and_, select
from sqlalchemy.orm import Session

from notee.store.cql.rows import slot_zone
from notee.store.templates_sql import template_t
from notee.store.users_sql import device_t, user_t

# The topic subscribe's two statements (one request, or a group of them: notee.api.subscribe_groups),
# sent as driver SQL on the DBAPI cursor of a Core connection (``_driver_rows``): it runs hundreds of
# times per second per process, and the ORM session with compiled constructs cost ~0.3 ms of CPU per
# statement where these cost ~0.04-0.1 ms (docs/BENCHMARKS.md, "Subscribe through the API").
# uq_user_user_id, in index order (two writers lock overlapping sets in the same order). The lock of a
# writer that adds the users' rows (notee.domain.subscriptions), shared or exclusive. It reads the
# users' zones, which the writer stores on the topic slot rows (a zone change waits for it).
_USERS_ZONES = (
    "SELECT user_id, timezone FROM `user` WHERE service = %(service)s AND user_id IN %(user_ids)s ORDER BY user_id"
)
_LOCK_USERS = {False: f"{_USERS_ZONES} LOCK IN SHARE MODE", True: f"{_USERS_ZONES} FOR UPDATE"}
# The rest of its MySQL read in one round trip: every template of the type (whatever its method: the
# caller tells "no such template" from "a template of the other method"), and the devices of the users
# the caller has locked (so they exist: the user rows need no second look-up, 1,000 of them per bulk
# subscribe, docs/AUDIENCES.md "What an imported subscription costs"). A device's created_at comes as
# text (DATETIME(6): fixed width, so it sorts as the time does): PyMySQL's datetime conversion per row
# cost more than the sort needs. PRIMARY KEY prefix (service) of notification_template; device PRIMARY
# KEY prefix.
_TEMPLATES_OF_TYPE = (
    "SELECT 'T', t.notification_method, t.notification_key, NULL, NULL"
    " FROM notification_template t WHERE t.service = %(service)s AND t.notification_type = %(type)s"
)
_SUBSCRIBE_CONTEXT = (
    f"{_TEMPLATES_OF_TYPE} UNION ALL"
    " SELECT 'D', d.user_id, d.device_token, d.device_os, CAST(d.created_at AS CHAR)"
    " FROM device d WHERE d.service = %(service)s AND d.user_id IN %(user_ids)s"
    # The users with a withdrawal kept of a failed write (notee/domain/withdrawals.py), which the
    # subscribe applies first: ix_subscription_withdrawal_user.
    " UNION ALL SELECT 'W', w.user_id, NULL, NULL, NULL FROM subscription_withdrawal w"
    " WHERE w.service = %(service)s AND w.user_id IN %(user_ids)s"
)


@dataclass(frozen=True, slots=True)
class SubscribeContext:
    """What a topic subscribe needs from MySQL besides the lock."""

    template_keys: dict[str, str]  # notification_method -> notification_key, of the requested type
    # user_id -> (device_token, device_os), oldest first, of every user asked for ([]: none)
    devices: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    # users asked for with a kept withdrawal (subscription_withdrawal) to apply before their rows are read
    kept: set[str] = field(default_factory=set)


def _connection(db: Session | Connection) -> Connection:
    return db if isinstance(db, Connection) else db.connection()


def _driver_rows(db: Session | Connection, sql: str, params: dict[str, Any]) -> tuple[tuple[Any, ...], ...]:
    """Every row of ``sql`` run on the DBAPI cursor of ``db``'s connection. ``exec_driver_sql`` builds
    an execution context and a result (its column map) around each statement: ~40-80 µs of CPU of a
    ~100-190 µs statement (docs/BENCHMARKS.md, "Subscribe through the API, third round"). An error
    takes SQLAlchemy's own path (``Connection._handle_dbapi_exception``, a private method, the one
    ``exec_driver_sql`` calls): the same exception types (the API's 503 mapping), the pool's
    disconnect handling and the ``handle_error`` events (``notee_store_errors_total``). A performance
    detour (docs/BENCHMARKS.md, "Performance detours"): SQLAlchemy is pinned exactly, and
    tests/integration/test_sqlalchemy_pins.py fails, naming it, when that private method changes. The
    transaction this opens on the DBAPI connection ends with the caller's, or when the pool resets
    the connection on its return (a rollback)."""
    conn = _connection(db)
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        return tuple(cursor.fetchall())
    except Exception as exc:
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
    finally:
        cursor.close()


def end_driver_transaction(db: Connection) -> None:
    """Roll back the DBAPI transaction ``_driver_rows`` opened on ``db``'s connection (SQLAlchemy began
    none, so ``Connection.rollback`` would send nothing): its row locks end and the connection stays
    checked out, ready for a new transaction. As ``Connection.rollback`` does it, errors included."""
    try:
        db.dialect.do_rollback(db.connection)
    except Exception as exc:
        db._handle_dbapi_exception(exc, None, None, None, None)


def lock_users_zones(
    db: Session | Connection, service: str, user_ids: Sequence[str], *, exclusive: bool = False
) -> dict[str, str]:
    """Lock the rows of those of ``user_ids`` that exist (shared, or ``exclusive``; one statement, in
    index order) until the caller's transaction ends; return user_id -> the zone its topic slot rows
    carry (``cql.rows.slot_zone``: '' for none). A user that does not exist is absent."""
    if not user_ids:
        return {}
    rows = _driver_rows(db, _LOCK_USERS[exclusive], {"service": service, "user_ids": tuple(sorted(set(user_ids)))})
    return {user_id: slot_zone(zone) for user_id, zone in rows}


def subscribe_context(db: Session | Connection, service: str, type_: str, user_ids: Sequence[str]) -> SubscribeContext:
    """Templates of ``type_``, the users' devices and which of them have kept withdrawals, in one
    statement. ``user_ids``: users the caller's transaction holds locked (``lock_users_zones``), so
    they exist; each is in ``devices``, with [] when it has none."""
    keys: dict[str, str] = {}
    kept: set[str] = set()
    found: dict[str, list[tuple[str, str, str]]] = {u: [] for u in user_ids}
    params: dict[str, Any] = {"service": service, "type": type_}
    sql = _TEMPLATES_OF_TYPE
    if user_ids:
        sql, params["user_ids"] = _SUBSCRIBE_CONTEXT, tuple(sorted(found))
    for kind, a, b, c, created_at in _driver_rows(db, sql, params):
        if kind == "T":
            keys[a] = b
        elif kind == "W":
            kept.add(a)
        else:
            found.setdefault(a, []).append((created_at, b, c))
    # registration order, as users_sql.list_devices (one device, the usual case, needs no sort)
    devices = {u: [(t, o) for _, t, o in (sorted(d) if len(d) > 1 else d)] for u, d in found.items()}
    return SubscribeContext(keys, devices, kept)


def users_with_devices(session: Session, service: str, user_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """user_id -> [(device_token, device_os)] of those of ``user_ids`` that exist in ``service`` (a
    user without devices maps to []), in one query (uq_user_user_id, device primary key prefix)."""
    out: dict[str, list[tuple[str, str]]] = {}
    if not user_ids:
        return out
    q = (
        select(user_t.c.user_id, device_t.c.device_token, device_t.c.device_os)
        .select_from(
            user_t.outerjoin(
                device_t, and_(device_t.c.service == user_t.c.service, device_t.c.user_id == user_t.c.user_id)
            )
        )
        .where(and_(user_t.c.service == service, user_t.c.user_id.in_(list(user_ids))))
        .order_by(user_t.c.user_id, device_t.c.created_at, device_t.c.device_token)
    )
    for user_id, token, os_ in session.execute(q):
        devices = out.setdefault(user_id, [])
        if token is not None:
            devices.append((token, os_))
    return out


def live_template_keys(session: Session, service: str | None = None) -> set[str]:
    """notification_key of every existing template (of one service, or all): a subscription row whose
    key is not here belongs to a deleted template."""
    q = select(template_t.c.notification_key)
    if service is not None:
        q = q.where(template_t.c.service == service)
    return {r.notification_key for r in session.execute(q)}


def live_cycle_templates(session: Session, service: str | None = None) -> dict[str, tuple[str, str]]:
    """notification_key -> (service, type) of every CYCLE template (of one service, or all): one query."""
    q = select(template_t.c.notification_key, template_t.c.service, template_t.c.notification_type).where(
        template_t.c.notification_method == "CYCLE"
    )
    if service is not None:
        q = q.where(template_t.c.service == service)
    return {r.notification_key: (r.service, r.notification_type) for r in session.execute(q)}
