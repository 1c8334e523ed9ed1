"""The `notee` command: one entry point per process and tool. Each command builds its Settings here,
at start-up, then hands off to the module that owns the concern."""

from __future__ import annotations

import json
import logging

import typer
from pydantic import ValidationError

from notee.cli import remote as cli_http
from notee.core import logs
from notee.core.settings import Settings
from notee.emulator.tls import TlsFiles

app = typer.Typer(help="Notee push-notification platform.", no_args_is_help=True, add_completion=False)
log = logging.getLogger("notee")


def _settings(**overrides: object) -> Settings:
    """The process's settings (``overrides``: command-line flags over NOTEE_* variables); an invalid one
    stops it with one line per setting (never its value)."""
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        for error in exc.errors():
            name = "NOTEE_" + str(error["loc"][0]).upper() if error["loc"] else "settings"
            typer.echo(f"notee: invalid configuration: {name}: {error['msg']}", err=True)
        raise typer.Exit(2) from None
    logs.setup(settings.log_level, settings.log_format)
    return settings


def _store_down(settings: Settings, exc: Exception) -> str | None:
    """One line naming the store that could not be reached and where, or None when ``exc`` is not
    a connection problem (then the traceback is the useful answer)."""
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


@app.command()
def migrate(
    status: bool = typer.Option(False, "--status", help="Only list applied and pending files of both stores."),
    allow_out_of_order: bool = typer.Option(
        False, "--allow-out-of-order", help="Apply a pending file numbered below the highest applied one."
    ),
    lock_timeout: int = typer.Option(600, help="Seconds to wait for another running `notee migrate`."),
) -> None:
    """Apply pending schema migrations to MySQL and Cassandra (idempotent; one run at a time)."""
    from notee.usecases import migrate as migrations

    settings = _settings()
    # The driver logs a traceback per failed contact point; a store that is down is reported below,
    # in one line.
    logging.getLogger("cassandra.cluster").setLevel(logging.CRITICAL)
    try:
        if status:
            for st in migrations.status_all(settings):
                typer.echo(f"{st.store}: {len(st.applied)} applied, {len(st.pending)} pending")
                for _version, name, applied_at in st.applied:
                    when = applied_at.strftime("%Y-%m-%dT%H:%M:%SZ") if applied_at else "?"
                    typer.echo(f"  applied  {name}  ({when})")
                for name in st.pending:
                    typer.echo(f"  pending  {name}")
            return
        applied = migrations.migrate_all(settings, allow_out_of_order=allow_out_of_order, lock_timeout_s=lock_timeout)
    except migrations.MigrationError as exc:
        typer.echo(f"notee migrate: {exc}", err=True)
        raise typer.Exit(1) from exc
    except Exception as exc:
        line = _store_down(settings, exc)
        if line is None:
            raise
        typer.echo(f"error: {line}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))


@app.command()
def api(
    host: str | None = None,
    port: int | None = None,
    tls_cert: str | None = typer.Option(None, help="PEM certificate: serve HTTPS (NOTEE_API_TLS_CERT_FILE)."),
    tls_key: str | None = typer.Option(None, help="PEM private key of --tls-cert (NOTEE_API_TLS_KEY_FILE)."),
    admin_host: str | None = typer.Option(None, help="Admin listener address (NOTEE_API_ADMIN_HOST)."),
    admin_port: int | None = typer.Option(
        None, help="Serve the admin API on its own listener at this port (NOTEE_API_ADMIN_PORT)."
    ),
) -> None:
    """Serve the HTTP API (OpenAPI at /docs); HTTPS with a certificate and key; the admin API on its
    own listener with --admin-port."""
    from notee.api.server import serve

    flags = {
        "api_tls_cert_file": tls_cert,
        "api_tls_key_file": tls_key,
        "api_admin_host": admin_host,
        "api_admin_port": admin_port,
    }
    settings = _settings(**{k: v for k, v in flags.items() if v is not None})  # flags over NOTEE_* variables
    serve(settings, host or settings.api_host, port or settings.api_port)


@app.command()
def emulator(
    host: str | None = None,
    port: int | None = None,
    state_dir: str | None = None,
    realistic: bool = typer.Option(
        False,
        help="Behave like FCM/APNs: OAuth tokens, quotas, per-device "
        "rates, APNs stream limits and GOAWAY on --apns-port.",
    ),
    apns_port: int | None = typer.Option(None, help="APNs port in --realistic mode (default: port + 1)."),
    name: list[str] = typer.Option(
        [], help="Another host name its certificate must hold (repeatable; e.g. the compose service name)."
    ),
) -> None:
    """Serve Notee's FCM + APNs emulator over TLS (HTTP/2 and HTTP/1.1) with its /_emu control API."""
    from notee.emulator.server import EmulatorConfig, serve

    settings = _settings()
    config = EmulatorConfig(
        host or settings.emulator_host,
        port or settings.emulator_port,
        state_dir or settings.emulator_state_dir,
        realistic=realistic,
        apns_port=apns_port,
        names=tuple(name),
        log_level=settings.log_level,
        log_format=settings.log_format,
    )
    where = f"https://{config.host}:{config.port}"

    def ready(files: TlsFiles) -> None:
        typer.echo(f"notee emulator on {where}  CA certificate: {files.ca_cert.resolve()}")
        typer.echo(f"  point Notee at it: NOTEE_EMULATOR_URL={where} NOTEE_EMULATOR_CA_FILE={files.ca_cert.resolve()}")

        if realistic:
            typer.echo(
                f"  realistic: APNs on NOTEE_EMULATOR_APNS_URL=https://{config.host}:{config.apns_port_used}, "
                f"FCM access tokens from {where}/token"
            )

    serve(config, on_ready=ready)


@app.command()
def worker(
    lanes: int = typer.Option(2, min=1, help="Tasks this process runs at once."),
    service: list[str] = typer.Option([], help="Only claim these services' jobs (repeatable; default all)."),
) -> None:
    """Run a fan-out worker until SIGTERM/SIGINT (then it stops gracefully)."""
    from notee.worker import lanes as fanout_worker

    fanout_worker.run(_settings(), lanes=lanes, services=service or None)


@app.command()
def webhooks() -> None:
    """Run the webhook dispatcher until SIGTERM/SIGINT: send the outbox's events to the services'
    endpoints, signed, retrying with backoff (docs/WEBHOOKS.md). Any number may run."""
    from notee.webhooks import dispatcher as webhook_dispatcher

    webhook_dispatcher.run(_settings())


@app.command()
def prune(days: int | None = typer.Option(None, help="Override settings.retention_days.")) -> None:
    """Delete rows past retention: finished jobs (and tasks), tick rows, dead letters, finished webhook
    deliveries. The scheduler also does this every hour."""
    from notee.store.runtime import Runtime
    from notee.usecases import retention

    settings = _settings()
    if days is not None:
        settings = settings.model_copy(update={"retention_days": days})
    runtime = Runtime(settings)
    try:
        counts = retention.prune_all(runtime)
    finally:
        runtime.close()
    typer.echo("pruned " + ", ".join(f"{n} {what}" for what, n in counts.items()))


@app.command()
def scheduler() -> None:
    """Run the cycle scheduler: each minute, one fan-out job per due cycle template (SIGTERM stops it)."""
    from notee.scheduler.runner import serve
    from notee.store.runtime import Runtime

    runtime = Runtime(_settings())
    try:
        serve(runtime)
    finally:
        runtime.close()


@app.command()
def reconcile(
    service: str | None = typer.Option(None, help="Only this service (default: all)."),
    fetch_size: int = typer.Option(1000, help="Index rows per Cassandra page."),
) -> None:
    """Recompute subscription `count`s and per-topic subscriber counts from the per-user index, delete
    rows of deleted templates and stale cycle due buckets (safe to run any time)."""
    from notee.store.runtime import Runtime
    from notee.usecases import reconcile as rec

    runtime = Runtime(_settings())
    try:
        report = rec.reconcile(runtime, service=service, fetch_size=fetch_size)
    finally:
        runtime.close()
    typer.echo(json.dumps(report))


@app.command("backfill-zones")
def backfill_zones(service: str | None = typer.Option(None, help="Only this service (default: all).")) -> None:
    """Write each user's time zone on its topic slot rows written before they carried one, then mark the
    service: its local-time publishes read each zone's rows alone from then on (docs/FANOUT.md)."""
    from notee.store.runtime import Runtime
    from notee.usecases import reconcile as rec

    runtime = Runtime(_settings())
    try:
        report = rec.backfill_zones(runtime, service=service)
    finally:
        runtime.close()
    typer.echo(json.dumps(report))


@app.command("backfill-occupancy")
def backfill_occupancy(
    service: str | None = typer.Option(None, help="Only this service's templates (default: all)."),
    fetch_size: int = typer.Option(1000, help="Index rows per Cassandra page."),
) -> None:
    """Record which slots the targets of templates older than target_slots occupy (from the per-user
    index), then let their jobs skip the empty slots. Run once every API process writes target_slots;
    idempotent. Until then such a template's jobs walk every slot (docs/FANOUT.md "Occupancy")."""
    from notee.store.runtime import Runtime
    from notee.usecases import occupancy

    runtime = Runtime(_settings())
    try:
        report = occupancy.backfill(runtime, service=service, fetch_size=fetch_size)
    finally:
        runtime.close()
    typer.echo(json.dumps(report))


@app.command("cassandra-ready")
def cassandra_ready(timeout: float = typer.Option(300, help="Give up after this many seconds (exit 1).")) -> None:
    """Wait until every node of NOTEE_CASSANDRA_HOSTS sees all of them UP, NORMAL (joined) and in
    schema agreement: a multi-node cluster is ready only then, not when each node answers CQL."""
    from notee.store import ring

    settings = _settings()
    try:
        waited = ring.wait_ready(
            settings.cassandra_hosts,
            settings.cassandra_port,
            protocol_version=settings.cassandra_protocol_version,
            timeout_s=timeout,
        )
    except TimeoutError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"cassandra ring of {len(settings.cassandra_hosts)} node(s) ready after {waited:.1f} s")


dead_letters_app = typer.Typer(
    help="Pushes that still failed after the retries: list and send again.", no_args_is_help=True
)
app.add_typer(dead_letters_app, name="dead-letters")


@cli_http.jobs_app.command("requeue")  # beside list/show/cancel; this one is the operator's, on the database
def jobs_requeue(job_id: str = typer.Argument(..., help="The failed job's id.")) -> None:
    """Resume a failed job from its tasks' checkpoints (operators: reads the database, no API key)."""
    from notee.core.errors import NoteeError
    from notee.store.runtime import Runtime
    from notee.usecases import publish as jobs

    runtime = Runtime(_settings())
    try:
        with runtime.sessions.begin() as session:
            job, progress = jobs.requeue_job(session, job_id)
    except NoteeError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
    finally:
        runtime.close()
    typer.echo(
        f"job {job.job_id} requeued: {job.state}, {progress.tasks_done} of {job.task_count} tasks done, "
        f"{progress.sent} sent so far"
    )


@dead_letters_app.command("list")
def dead_letters_list(
    service: str = typer.Option(..., help="The service (tenant)."),
    job: str | None = typer.Option(None, help="Only this job's dead letters."),
    limit: int = typer.Option(100, min=1, max=500),
) -> None:
    """A service's dead letters, newest first, one JSON object a line (device tokens shortened)."""
    from notee.core.logs import token_hint
    from notee.store import deadletter
    from notee.store.runtime import Runtime

    runtime = Runtime(_settings())
    try:
        with runtime.sessions() as session:
            rows = deadletter.list_for_service(session, service, limit=limit, job_id=job)
    finally:
        runtime.close()
    for r in rows:
        typer.echo(
            json.dumps(
                {
                    "id": r.id,
                    "job_id": r.job_id,
                    "device": token_hint(r.device_token),
                    "provider": r.provider,
                    "reason": r.reason,
                    "attempts": r.attempts,
                    "created_at": r.created_at.isoformat(),
                }
            )
        )
    typer.echo(f"{len(rows)} dead letter(s)", err=True)


@dead_letters_app.command("replay")
def dead_letters_replay(
    service: str = typer.Option(..., help="The service (tenant)."),
    id: list[int] = typer.Option([], "--id", help="Dead letter ids (repeatable; default: any)."),
    job: str | None = typer.Option(None, help="Only this job's dead letters."),
    limit: int = typer.Option(1000, min=1, max=10000),
) -> None:
    """Send dead letters again; delivered and pruned ones are removed, failures are recorded anew."""
    import asyncio

    from notee.store.runtime import Runtime
    from notee.usecases.deliver import DeliverySender, ReplayResult

    runtime = Runtime(_settings())

    async def run() -> ReplayResult:
        sender = DeliverySender(runtime)
        try:
            return await sender.replay(service, ids=id or None, job_id=job, limit=limit)
        finally:
            await sender.close()

    try:
        result = asyncio.run(run())
    finally:
        runtime.close()
    typer.echo(
        json.dumps(
            {
                "replayed": result.replayed,
                "delivered": result.delivered,
                "pruned": result.pruned,
                "failed": result.failed,
            }
        )
    )


@app.command()
def healthcheck(
    process: str = typer.Argument(..., help="api, worker, scheduler or webhooks"),
    url: str | None = typer.Option(
        None, help="api: the health URL (default http://127.0.0.1:<NOTEE_API_PORT>/healthz)."
    ),
    max_age: float | None = typer.Option(
        None, help="worker/scheduler: oldest heartbeat accepted, in seconds (default worker 30, scheduler 150)."
    ),
) -> None:
    """Exit 0 when the process in this container is healthy, 1 (with one line saying why) when not:
    api answers /healthz with both stores ok; worker/scheduler/webhooks touched NOTEE_HEARTBEAT_FILE recently.
    For container healthchecks (compose.yaml)."""
    from notee.core import heartbeat

    settings = _settings()
    if process == "api":
        import httpx

        target = url or f"http://127.0.0.1:{settings.api_port}/healthz"
        try:
            response = httpx.get(target, timeout=5.0, trust_env=False)  # a local probe: no proxy
            healthy = response.status_code == 200 and response.json().get("status") == "ok"
            reason = f"{target} answered {response.status_code} {response.text[:200]}"
        except (httpx.HTTPError, ValueError) as exc:
            healthy, reason = False, f"{target}: {type(exc).__name__}: {exc}"
    elif process in heartbeat.MAX_AGE_S:
        if not settings.heartbeat_file:
            typer.echo("unhealthy: NOTEE_HEARTBEAT_FILE is not set", err=True)
            raise typer.Exit(1)
        limit = max_age if max_age is not None else heartbeat.MAX_AGE_S[process]
        age = heartbeat.age_s(settings.heartbeat_file)
        healthy = age is not None and age <= limit
        reason = "no heartbeat yet" if age is None else f"last heartbeat {age:.0f} s ago (limit {limit:.0f} s)"
    else:
        typer.echo(f"unknown process {process!r}: api, worker or scheduler", err=True)
        raise typer.Exit(2)
    if not healthy:
        typer.echo(f"unhealthy: {reason}", err=True)
        raise typer.Exit(1)
    typer.echo(f"healthy: {reason}")


credentials_app = typer.Typer(help="Provider credentials stored by Notee (encrypted at rest).", no_args_is_help=True)
app.add_typer(credentials_app, name="credentials")


@credentials_app.command("rotate-key")
def rotate_key() -> None:
    """Re-encrypt every stored provider credential under NOTEE_CREDENTIALS_KEY. Rotation: give every
    process the new key as NOTEE_CREDENTIALS_KEY and the old one in NOTEE_CREDENTIALS_OLD_KEYS, run
    this, then drop the old key."""
    from notee.core.crypto import SecretsBox
    from notee.core.errors import ProviderConfigError
    from notee.domain import credentials, webhooks
    from notee.store.runtime import Runtime

    settings = _settings()
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
    typer.echo(
        f"re-encrypted {counts['credentials']} credential(s) of {counts['services']} service(s) "
        f"and {secrets_n} webhook secret(s) under NOTEE_CREDENTIALS_KEY"
    )


@app.command()
def openapi(
    markdown: bool = typer.Option(
        False, "--markdown", help="The API reference in Markdown (docs/API-REFERENCE.md) instead of the JSON document."
    ),
) -> None:
    """Print the OpenAPI document (no database needed)."""
    from notee.api import openapi as reference
    from notee.api.app import create_app

    document = create_app(_settings()).openapi()
    typer.echo(reference.markdown(document) if markdown else json.dumps(document, indent=2), nl=not markdown)


cli_http.install(app)  # the commands that call a running Notee over HTTP (the SDK)


def main() -> None:
    app()
