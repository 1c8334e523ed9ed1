"""The operator's `notee` commands on the stores themselves (no API, no API key): migrations,
retention, reconcile and the backfills, waiting for the Cassandra ring and the credentials key's
rotation. Each command imports what it runs when it runs
(the `notee` command starts fast)."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer

from notee.cli.config import load_settings
from notee.cli.remote_client import AsJson, ExitCode, print_json, say
from notee.core.settings import Settings

if TYPE_CHECKING:
    from notee.usecases.migrate import Status


def store_down(settings: Settings, exc: Exception) -> str | None:
    """One line naming the store that could not be reached and where, or None when ``exc`` is not
    a connection problem (then the traceback is the useful answer)."""
    # deferred: the store drivers, loaded by the command that failed already
    from cassandra import DriverException
    from cassandra.cluster import NoHostAvailable
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError, OperationalError

    if isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated):
        url = make_url(settings.mysql_url.get_secret_value())
        reason = " ".join(str(exc.orig).split())
        return f"MySQL at {url.host}:{url.port or 3306} (database {url.database}) is not reachable: {reason}"
    if isinstance(exc, (NoHostAvailable, DriverException)):
        where = ",".join(settings.cassandra_hosts)
        errors = getattr(exc, "errors", None) or {}
        reason = " ".join(str(next(iter(errors.values()), exc)).split())
        return f"Cassandra at {where} port {settings.cassandra_port} is not reachable: {reason}"
    return None


def migrate(
    status: bool = typer.Option(False, "--status", help="Only list applied and pending files of both stores."),
    allow_out_of_order: bool = typer.Option(
        False, "--allow-out-of-order", help="Apply a pending file numbered below the highest applied one."
    ),
    lock_timeout: int = typer.Option(600, help="Seconds to wait for another running `notee migrate`."),
    as_json: AsJson = False,
) -> None:
    """Apply pending schema migrations to MySQL and Cassandra (idempotent; one run at a time). A store
    that cannot be reached is one line and exit 5."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.usecases import migrate as migrations

    settings = load_settings()
    # The driver logs a traceback per failed contact point; a store that is down is reported below,
    # in one line.
    logging.getLogger("cassandra.cluster").setLevel(logging.CRITICAL)
    try:
        if status:
            _print_status(migrations.status_all(settings), as_json)
            return
        applied = migrations.migrate_all(settings, allow_out_of_order=allow_out_of_order, lock_timeout_s=lock_timeout)
    except migrations.MigrationError as exc:
        typer.echo(f"notee migrate: {exc}", err=True)
        raise typer.Exit(1) from exc
    except Exception as exc:
        line = store_down(settings, exc)
        if line is None:
            raise
        typer.echo(f"error: {line}", err=True)
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    line = f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else "")
    say(line, {"applied": applied}, as_json)


def _print_status(stores: list[Status], as_json: bool) -> None:
    """`notee migrate --status`: each store's applied files (with when) and pending ones."""
    if as_json:
        print_json({"stores": [_store_status(st) for st in stores]})
        return
    for st in stores:
        typer.echo(f"{st.store}: {len(st.applied)} applied, {len(st.pending)} pending")
        for _version, name, applied_at in st.applied:
            typer.echo(f"  applied  {name}  ({_when(applied_at)})")
        for name in st.pending:
            typer.echo(f"  pending  {name}")


def _store_status(st: Status) -> dict[str, Any]:
    applied = [{"name": name, "applied_at": _when(at) if at else None} for _version, name, at in st.applied]
    return {"store": st.store, "applied": applied, "pending": list(st.pending)}


def _when(applied_at: datetime | None) -> str:
    return applied_at.strftime("%Y-%m-%dT%H:%M:%SZ") if applied_at else "?"


def prune(
    days: int | None = typer.Option(None, help="Override settings.retention_days."), as_json: AsJson = False
) -> None:
    """Delete rows past retention: finished jobs (and tasks), tick rows, dead letters, finished webhook
    deliveries, single sends' Idempotency-Keys older than 24 hours. The scheduler also does this every hour."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.store.runtime import Runtime
    from notee.usecases import retention

    settings = load_settings()
    if days is not None:
        settings = settings.model_copy(update={"retention_days": days})
    runtime = Runtime(settings)
    try:
        counts = retention.prune_all(runtime)
    finally:
        runtime.close()
    say("pruned " + ", ".join(f"{n} {what}" for what, n in counts.items()), {"pruned": counts}, as_json)


def reconcile(
    service: str | None = typer.Option(None, help="Only this service (default: all)."),
    fetch_size: int = typer.Option(1000, help="Index rows per Cassandra page."),
) -> None:
    """Recompute subscription `count`s and per-topic subscriber counts from the per-user index, delete
    rows of deleted templates and stale cycle due buckets (safe to run any time)."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.store.runtime import Runtime
    from notee.usecases import reconcile as rec

    runtime = Runtime(load_settings())
    try:
        report = rec.reconcile(runtime, service=service, fetch_size=fetch_size)
    finally:
        runtime.close()
    typer.echo(json.dumps(report))


def backfill_zones(service: str | None = typer.Option(None, help="Only this service (default: all).")) -> None:
    """Write each user's time zone on its topic slot rows written before they carried one, then mark the
    service: its local-time publishes read each zone's rows alone from then on (docs/FANOUT.md)."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.store.runtime import Runtime
    from notee.usecases import zone_backfill

    runtime = Runtime(load_settings())
    try:
        report = zone_backfill.backfill_zones(runtime, service=service)
    finally:
        runtime.close()
    typer.echo(json.dumps(report))


def recount_engagement(
    service: str = typer.Argument(..., help="The job's service."),
    job_id: str = typer.Argument(..., help="The job whose receipt counters to repair."),
) -> None:
    """Set a job's (or a single send's) receipt counters and its share of its day's, type's and topic's
    figures to the receipts stored for it (after a counter write failed); prints the counts
    (docs/ENGAGEMENT.md). Not while it takes receipts (the scheduler's recount waits for that)."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.store.runtime import Runtime
    from notee.usecases import engagement_stats

    runtime = Runtime(load_settings())
    try:
        counts = engagement_stats.recount_job(runtime, service, job_id)
    finally:
        runtime.close()
    typer.echo(json.dumps(counts))


def backfill_occupancy(
    service: str | None = typer.Option(None, help="Only this service's templates (default: all)."),
    fetch_size: int = typer.Option(1000, help="Index rows per Cassandra page."),
) -> None:
    """Record which slots the targets of templates older than target_slots occupy (from the per-user
    index), then let their jobs skip the empty slots. Run once every API process writes target_slots;
    idempotent. Until then such a template's jobs walk every slot (docs/FANOUT.md "Occupancy")."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.store.runtime import Runtime
    from notee.usecases import occupancy

    runtime = Runtime(load_settings())
    try:
        report = occupancy.backfill(runtime, service=service, fetch_size=fetch_size)
    finally:
        runtime.close()
    typer.echo(json.dumps(report))


def cassandra_ready(
    timeout: float = typer.Option(300, help="Give up after this many seconds (exit 5)."), as_json: AsJson = False
) -> None:
    """Wait until every node of NOTEE_CASSANDRA_HOSTS sees all of them UP, NORMAL (joined) and in
    schema agreement: a multi-node cluster is ready only then, not when each node answers CQL."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.store import ring

    settings = load_settings()
    try:
        waited = ring.wait_ready(
            settings.cassandra_hosts,
            settings.cassandra_port,
            protocol_version=settings.cassandra_protocol_version,
            timeout_s=timeout,
        )
    except TimeoutError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(ExitCode.UNAVAILABLE) from exc
    nodes = len(settings.cassandra_hosts)
    say(f"cassandra ring of {nodes} node(s) ready after {waited:.1f} s", {"nodes": nodes, "waited_s": waited}, as_json)


credentials_app = typer.Typer(help="Provider credentials stored by Notee (encrypted at rest).", no_args_is_help=True)


@credentials_app.command("rotate-key")
def rotate_key(as_json: AsJson = False) -> None:
    """Re-encrypt every stored provider credential under NOTEE_CREDENTIALS_KEY. Rotation: give every
    process the new key as NOTEE_CREDENTIALS_KEY and the old one in NOTEE_CREDENTIALS_OLD_KEYS, run
    this, then drop the old key."""
    # deferred: each command loads only what it runs (`notee` starts fast)
    from notee.core.crypto import SecretsBox
    from notee.core.errors import ProviderConfigError
    from notee.domain import credentials, webhooks
    from notee.store.runtime import Runtime

    settings = load_settings()
    runtime = Runtime(settings)
    try:
        with runtime.sessions() as session, session.begin():
            counts = credentials.rotate_credentials_key(session, SecretsBox.from_settings(settings))
            secrets_n = webhooks.rotate_secrets_key(session, SecretsBox.from_settings(settings))
    except ProviderConfigError as exc:
        typer.echo(f"notee: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        runtime.close()
    line = (
        f"re-encrypted {counts['credentials']} credential(s) of {counts['services']} service(s) "
        f"and {secrets_n} webhook secret(s) under NOTEE_CREDENTIALS_KEY"
    )
    say(line, {**counts, "webhook_secrets": secrets_n}, as_json)
