"""``stateward worker`` and ``stateward serve``: the long-running processes of a deployment (Typer's
definitions; the worker's short path and its start are in cli/worker_cmd.py, the service in api/serve.py)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from stateward.cli import DEFAULT_DB
from stateward.cli.output import reported_errors
from stateward.cli.plugins import DbOpt
from stateward.cli.prefork import MAX_PROCESSES
from stateward.core.errors import ErrorCode, UserError

ConcurrencyOpt = Annotated[
    int,
    typer.Option(min=1, help="Runs driven at once by this process (up to 256 threads; 10,000 tasks with --async)."),
]
UseAsyncOpt = Annotated[
    bool,
    typer.Option("--async", help="Drive the runs as tasks of one event loop (async models and tools awaited)."),
]
LeaseTtlOpt = Annotated[float, typer.Option(help="Lease TTL in seconds (>= 3 x heartbeat).")]
HeartbeatOpt = Annotated[float, typer.Option(help="Lease renewal interval in seconds.")]
IdleExitOpt = Annotated[float | None, typer.Option(help="Exit after this many idle seconds.")]
PollOpt = Annotated[float, typer.Option(min=0.01, help="Seconds between looks for runnable runs when idle.")]
ExpireEveryOpt = Annotated[
    float,
    typer.Option(min=0.1, help="Seconds between sweeps for expired requests, due timers and due model retries."),
]
MaxCrashesOpt = Annotated[
    int | None,
    typer.Option(min=1, help="Stop (exit 5) once this many steps crashed in this worker; default: never."),
]
CrashRetriesOpt = Annotated[
    int, typer.Option(min=0, help="Retries of a run whose step crashed before it ends FAILED / step_crashed.")
]
RetryDelayOpt = Annotated[
    float, typer.Option(min=0.001, help="First backoff in seconds after a crash or an unbuildable agent (doubles).")
]
AsJsonOpt = Annotated[bool, typer.Option("--json", help="Print the final counts as JSON on stdout.")]
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        min=0, max=65535, help="Serve Prometheus metrics on this port at /metrics (0: any free port; otel extra)."
    ),
]
MetricsAddrOpt = Annotated[str, typer.Option(help="Address the metrics endpoint binds.")]
ServiceDbOpt = Annotated[
    str | None,
    typer.Option(
        "--service-db",
        envvar="STATEWARD_SERVICE_DB",
        help="With a temporal:// --db: the store (SQLite path or postgresql:// URL) of the service's API keys,"
        " sessions and webhooks (serve needs it; a worker records the runs' webhook notices there).",
    ),
]
ProcessesOpt = Annotated[
    int,
    typer.Option(
        min=1,
        max=MAX_PROCESSES,
        help="Worker processes forked after importing once (each with --concurrency slots; see below).",
    ),
]


def worker(
    db: DbOpt = DEFAULT_DB,
    concurrency: ConcurrencyOpt = 1,
    use_async: UseAsyncOpt = False,
    lease_ttl: LeaseTtlOpt = 30.0,
    heartbeat: HeartbeatOpt = 10.0,
    idle_exit: IdleExitOpt = None,
    poll: PollOpt = 0.2,
    expire_every: ExpireEveryOpt = 5.0,
    max_crashes: MaxCrashesOpt = None,
    crash_retries: CrashRetriesOpt = 3,
    retry_delay: RetryDelayOpt = 5.0,
    as_json: AsJsonOpt = False,
    metrics_port: MetricsPortOpt = None,
    metrics_addr: MetricsAddrOpt = "127.0.0.1",
    processes: ProcessesOpt = 1,
    service_db: ServiceDbOpt = None,
) -> None:
    """Claim runnable runs and drive them; SIGTERM finishes the current step and releases leases.

    A step that raises is recorded on its run (step_crashed) and retried with backoff; after its
    retries the run ends FAILED / step_crashed. A run whose agent this process cannot build backs off
    (agent_unavailable) and is then PAUSED for an operator. Neither stops the worker.

    Exit status: 0 when stopped by a signal, or on --idle-exit with nothing troubling; 5 when
    --max-crashes was reached, or on --idle-exit when this worker failed or parked a run, or its
    own loop met an unexpected error (all counted in the final line).

    --processes N: one supervisor imports once and forks N workers, each opening its own store
    connections. SIGTERM / SIGINT are forwarded and drained; a worker killed by another signal is
    replaced (more than N deaths within a minute: all stop, exit 5); one that exits by itself is not.
    The exit status is the highest of the workers'. --json sums their counts; --metrics-port needs
    one process.
    """
    from stateward.cli.worker_cmd import WorkerOptions, start_worker

    code = start_worker(
        WorkerOptions(
            db=db,
            concurrency=concurrency,
            use_async=use_async,
            lease_ttl=lease_ttl,
            heartbeat=heartbeat,
            idle_exit=idle_exit,
            poll=poll,
            expire_every=expire_every,
            max_crashes=max_crashes,
            crash_retries=crash_retries,
            retry_delay=retry_delay,
            as_json=as_json,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            processes=processes,
            service_db=service_db,
        )
    )
    if code:
        raise typer.Exit(code)


HostOpt = Annotated[str, typer.Option("--host", help="Address to bind.")]
PortOpt = Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to bind.")]
MetricsOpt = Annotated[
    bool,
    typer.Option(
        "--metrics",
        help="Also serve Prometheus text at /metrics (otel extra); bearer STATEWARD_METRICS_TOKEN if set.",
    ),
]
WebhookAllowHttpOpt = Annotated[
    bool,
    typer.Option(
        "--webhook-allow-http",
        help="Let webhooks use http:// (else https only; or STATEWARD_WEBHOOK_ALLOW_HTTP=1).",
    ),
]
WebhookAllowNetworkOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--webhook-allow-network",
        help="A network (CIDR) webhooks may reach despite the target rules; repeatable"
        " (or STATEWARD_WEBHOOK_ALLOW_NETWORKS, comma-separated).",
    ),
]
DocsOpt = Annotated[
    bool,
    typer.Option("--docs", help="Also serve Swagger UI at /docs (local files, strict CSP); off by default."),
]
MaxStreamsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-streams", min=1, help="Event streams open at once in all (default 200, STATEWARD_MAX_STREAMS)."
    ),
]
MaxStreamsPerKeyOpt = Annotated[
    int | None,
    typer.Option(
        "--max-streams-per-key",
        min=1,
        help="Event streams open at once per key (default 20, STATEWARD_MAX_STREAMS_PER_KEY).",
    ),
]


def serve(
    db: DbOpt = DEFAULT_DB,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8080,
    service_db: ServiceDbOpt = None,
    metrics: MetricsOpt = False,
    webhook_allow_http: WebhookAllowHttpOpt = False,
    webhook_allow_network: WebhookAllowNetworkOpt = None,
    docs: DocsOpt = False,
    max_streams: MaxStreamsOpt = None,
    max_streams_per_key: MaxStreamsPerKeyOpt = None,
) -> None:
    """The HTTP API (OpenAPI at /openapi.json): API-key principals, tenant-scoped routes under /v1.

    Answers record and return at once; run `stateward worker` on the same store to drive runs. Needs
    the `serve` extra (pip install 'stateward[serve]'). /metrics takes no API key (a scraper is no
    tenant): keep the bind address private or set STATEWARD_METRICS_TOKEN. On a temporal:// --db, the
    workers on its task queue drive the runs and --service-db names the store of keys, sessions and webhooks.
    """
    with reported_errors(False):
        try:
            from stateward.api.serve import serve as run_service
            from stateward.api.serve import stream_limits
        except ImportError as exc:
            raise UserError(
                f"the HTTP service needs FastAPI and uvicorn ({exc}); pip install 'stateward[serve]'",
                code=ErrorCode.CONFIGURATION_ERROR,
            ) from None
        from stateward.api.webhook_targets import ALLOW_HTTP_ENV, ALLOW_NETWORKS_ENV, TargetPolicy

        env = dict(os.environ)
        if webhook_allow_http:
            env[ALLOW_HTTP_ENV] = "1"
        if webhook_allow_network:
            env[ALLOW_NETWORKS_ENV] = ",".join([env.get(ALLOW_NETWORKS_ENV, ""), *webhook_allow_network])
        targets = TargetPolicy.from_env(env)
        run_service(
            db,
            service_db=service_db,
            host=host,
            port=port,
            metrics=metrics,
            targets=targets,
            docs=docs,
            streams=stream_limits(max_streams, max_streams_per_key),
        )
