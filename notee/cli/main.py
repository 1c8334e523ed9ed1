"""The `notee` command: one entry point per process and tool. Each command builds its Settings at
start-up (notee.cli.config), then hands off to the module that owns the concern. Here: the
processes (api, emulator, worker, webhooks, scheduler), their health check and the OpenAPI
document; the operator's commands on the stores are notee.cli.operations, the commands that call a
running Notee over HTTP notee.cli.remote. The end of this module lists every command in the order
`notee --help` shows them."""

from __future__ import annotations

import json
import logging

import typer

from notee.cli import operations, remote
from notee.cli.config import load_settings
from notee.core.version import VERSION
from notee.emulator.tls import TlsFiles

# add_completion: `notee --install-completion` / `--show-completion` (bash, zsh, fish, PowerShell).
app = typer.Typer(help="Notee push-notification platform.", no_args_is_help=True, add_completion=True)
log = logging.getLogger("notee")


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"notee {VERSION}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print Notee's version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    """Notee push-notification platform."""


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
    settings = load_settings(**{k: v for k, v in flags.items() if v is not None})  # flags over NOTEE_* variables
    serve(settings, host or settings.api_host, port or settings.api_port)


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
    try:
        from notee.emulator.server import EmulatorConfig, serve
    except ImportError as missing:  # its server is an extra: production installs leave it out
        typer.echo(f"error: the emulator needs its extra ({missing.name}): pip install 'notee[emulator]'", err=True)
        raise typer.Exit(1) from missing

    settings = load_settings()
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


def worker(
    lanes: int = typer.Option(2, min=1, help="Tasks this process runs at once."),
    service: list[str] = typer.Option([], help="Only claim these services' jobs (repeatable; default all)."),
) -> None:
    """Run a fan-out worker until SIGTERM/SIGINT (then it stops gracefully)."""
    from notee.worker import process as worker_process

    worker_process.run(load_settings(), lanes=lanes, services=service or None)


def webhooks() -> None:
    """Run the webhook dispatcher until SIGTERM/SIGINT: send the outbox's events to the services'
    endpoints, signed, retrying with backoff (docs/WEBHOOKS.md). Any number may run."""
    from notee.webhooks import dispatcher as webhook_dispatcher

    webhook_dispatcher.run(load_settings())


def scheduler() -> None:
    """Run the cycle scheduler: each minute, one fan-out job per due cycle template (SIGTERM stops it)."""
    from notee.scheduler.runner import serve
    from notee.store.runtime import Runtime

    runtime = Runtime(load_settings())
    try:
        serve(runtime)
    finally:
        runtime.close()


def _emulator_health(target: str | None, ca_file: str | None) -> tuple[bool, str]:
    """The emulator answers its control API over TLS verified with ``ca_file``: the CA the emulator
    writes at start is there, and its certificate is the one that CA signed (what its clients check)."""
    # deferred: only this health check needs them; the other commands start without
    import ssl

    import httpx

    if not target or not ca_file:
        return False, "NOTEE_EMULATOR_URL and NOTEE_EMULATOR_CA_FILE must be set"
    probe = target.rstrip("/") + "/_emu/stats"
    try:
        verify = ssl.create_default_context(cafile=ca_file)
        response = httpx.get(probe, timeout=5.0, verify=verify, trust_env=False)  # a local probe: no proxy
    except (httpx.HTTPError, OSError) as exc:  # OSError: no CA file yet
        return False, f"{probe}: {type(exc).__name__}: {exc}"
    return response.status_code == 200, f"{probe} answered {response.status_code}"


def healthcheck(
    process: str = typer.Argument(..., help="api, worker, scheduler, webhooks or emulator"),
    url: str | None = typer.Option(
        None,
        help="api: the health URL (default http://127.0.0.1:<NOTEE_API_PORT>/healthz); emulator: its base URL "
        "(default NOTEE_EMULATOR_URL).",
    ),
    max_age: float | None = typer.Option(
        None, help="worker/scheduler: oldest heartbeat accepted, in seconds (default worker 30, scheduler 150)."
    ),
) -> None:
    """Exit 0 when the process in this container is healthy, 1 (with one line saying why) when not:
    api answers /healthz with both stores ok; worker/scheduler/webhooks touched NOTEE_HEARTBEAT_FILE recently;
    emulator answers over TLS verified with NOTEE_EMULATOR_CA_FILE. For container healthchecks (compose.yaml)."""
    from notee.core import heartbeat

    settings = load_settings()
    if process == "api":
        import httpx

        target = url or f"http://127.0.0.1:{settings.api_port}/healthz"
        try:
            response = httpx.get(target, timeout=5.0, trust_env=False)  # a local probe: no proxy
            healthy = response.status_code == 200 and response.json().get("status") == "ok"
            reason = f"{target} answered {response.status_code} {response.text[:200]}"
        except (httpx.HTTPError, ValueError) as exc:
            healthy, reason = False, f"{target}: {type(exc).__name__}: {exc}"
    elif process == "emulator":
        healthy, reason = _emulator_health(url or settings.emulator_url, settings.emulator_ca_file)
    elif process in heartbeat.MAX_AGE_S:
        if not settings.heartbeat_file:
            typer.echo("unhealthy: NOTEE_HEARTBEAT_FILE is not set", err=True)
            raise typer.Exit(1)
        limit = max_age if max_age is not None else heartbeat.MAX_AGE_S[process]
        age = heartbeat.age_s(settings.heartbeat_file)
        healthy = age is not None and age <= limit
        reason = "no heartbeat yet" if age is None else f"last heartbeat {age:.0f} s ago (limit {limit:.0f} s)"
    else:
        typer.echo(f"unknown process {process!r}: api, worker, scheduler, webhooks or emulator", err=True)
        raise typer.Exit(2)
    if not healthy:
        typer.echo(f"unhealthy: {reason}", err=True)
        raise typer.Exit(1)
    typer.echo(f"healthy: {reason}")


def openapi(
    markdown: bool = typer.Option(
        False, "--markdown", help="The API reference in Markdown (docs/API-REFERENCE.md) instead of the JSON document."
    ),
) -> None:
    """Print the OpenAPI document (no database needed)."""
    from notee.api import openapi as reference
    from notee.api.app import create_app

    document = create_app(load_settings()).openapi()
    typer.echo(reference.markdown(document) if markdown else json.dumps(document, indent=2), nl=not markdown)


# Every command of `notee`, in the order `notee --help` lists them (commands, then groups).
app.command("migrate")(operations.migrate)
app.command("api")(api)
app.command("emulator")(emulator)
app.command("worker")(worker)
app.command("webhooks")(webhooks)
app.command("prune")(operations.prune)
app.command("scheduler")(scheduler)
app.command("reconcile")(operations.reconcile)
app.command("backfill-zones")(operations.backfill_zones)
app.command("recount-engagement")(operations.recount_engagement)
app.command("backfill-occupancy")(operations.backfill_occupancy)
app.command("cassandra-ready")(operations.cassandra_ready)
app.command("healthcheck")(healthcheck)
app.command("openapi")(openapi)
app.add_typer(operations.credentials_app, name="credentials")
remote.install(app)  # the commands that call a running Notee over HTTP (the SDK)


def main() -> None:
    # "notee" also under `python -m notee`: the completion scripts complete the installed command.
    app(prog_name="notee")
