"""``stateward worker``: the command a fleet starts once per process, so its start-up is paid per process.

A well-formed command line is parsed here with argparse and the worker starts without importing Typer
(Typer, Click and building the whole command tree are about a fifth of an idle worker's CPU). Anything
this parser does not fully accept (``--help``, a typo, a value out of range) is left to the Typer command in
cli/fleet_cmd.py, which owns the help text and the usage errors; both paths run :func:`start_worker`, and a
test holds the two option lists equal. The runtime is imported with this module, so cli/main.py imports
it with the collector paused, as it does every command's imports.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

from stateward.cli import DEFAULT_DB
from stateward.cli.output import EXIT_RUNS_TROUBLED, emit_json, reported_errors, say
from stateward.cli.prefork import MAX_PROCESSES, check_processes, supervise
from stateward.cli.worker_options import WorkerOptions as WorkerOptions  # the command's options, re-exported
from stateward.core.errors import ErrorCode, UserError
from stateward.runtime.leases import LeasePolicy
from stateward.runtime.recovery import RecoveryPolicy
from stateward.runtime.runtime import Runtime
from stateward.runtime.worker import Worker, positive_seconds
from stateward.store.outbox import WebhookStore
from stateward.temporal.target import is_temporal_url, refuse_service_db

if TYPE_CHECKING:
    from stateward.observability.prometheus import MetricsEndpoint
    from stateward.runtime.agent_registry import AgentRegistry
    from stateward.store.base import Store


def start_worker(opts: WorkerOptions) -> int:
    """Claim and drive runs until a signal (or ``idle_exit``); the exit status (see ``worker --help``).

    With ``processes`` above 1 this process imports once and forks that many workers (cli/prefork.py)."""
    with reported_errors(opts.as_json):
        check_processes(opts)
    if opts.processes > 1:
        return supervise(opts, run_worker)
    code, _ = run_worker(opts)
    return code


def run_worker(opts: WorkerOptions, agents: AgentRegistry | None = None) -> tuple[int, dict[str, int | bool]]:
    """One worker in this process: (its exit status, its final counts). ``agents``: those this process may
    build, if already loaded (by a forking supervisor); by default loaded on the first claim."""
    if is_temporal_url(opts.db):
        return _temporal_worker(opts, agents)
    if opts.service_db is not None:
        with reported_errors(opts.as_json):
            refuse_service_db(opts.db, opts.service_db)
    with reported_errors(opts.as_json):
        if opts.idle_exit is not None:
            positive_seconds("--idle-exit", opts.idle_exit)
        recovery = RecoveryPolicy(step_crash_retries=opts.crash_retries, base_delay_s=opts.retry_delay)
        endpoint = None if opts.metrics_port is None else _metrics_endpoint(opts)
        telemetry = None
        if endpoint is not None:
            from stateward.observability.tracing import Telemetry

            telemetry = Telemetry(metrics=endpoint.metrics)
        lease = LeasePolicy(ttl_s=opts.lease_ttl, heartbeat_s=opts.heartbeat)
        runtime = Runtime.open(opts.db, lease=lease, recovery=recovery, telemetry=telemetry, agents=agents)
        runtime.store.check_integrity()  # a damaged store: exit 1 STORE_CORRUPT before claiming anything
        kind = Worker
        if opts.use_async:  # asyncio and greenlet are loaded by an --async worker only
            from stateward.runtime.async_worker import AsyncWorker

            kind = AsyncWorker
        w = kind(
            runtime,
            concurrency=opts.concurrency,
            poll_s=opts.poll,
            expire_every_s=opts.expire_every,
            max_crashes=opts.max_crashes,
        )
    signal.signal(signal.SIGTERM, lambda *_: w.stop.set())
    signal.signal(signal.SIGINT, lambda *_: w.stop.set())
    mode = " (async, one event loop)" if opts.use_async else ""
    say(f"worker {runtime.owner}: {opts.concurrency} slot(s){mode} on {opts.db}")
    if endpoint is not None:
        say(f"metrics: http://{opts.metrics_addr}:{endpoint.port}/metrics")
    stats = w.run(idle_exit_s=opts.idle_exit)
    if endpoint is not None:
        endpoint.close()
    stopped_by_signal = w.stop.is_set() and not stats.stopped_on_crashes
    runtime.close()
    counts = stats.as_dict()
    say("worker stopped: " + " ".join(f"{k}={str(v).lower()}" for k, v in counts.items()))
    if opts.as_json:
        emit_json(counts)
    if stats.stopped_on_crashes or (not stopped_by_signal and stats.troubled):
        return EXIT_RUNS_TROUBLED, counts
    return 0, counts


def _temporal_worker(opts: WorkerOptions, agents: AgentRegistry | None) -> tuple[int, dict[str, int | bool]]:
    """A Temporal worker polling the URL's task queue until SIGTERM or SIGINT: Temporal hands it workflow and
    activity tasks (no claims, leases or sweeps of ours); ``--concurrency`` bounds the activities it runs at once."""
    import threading

    from stateward.runtime.agent_registry import process_agents

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with reported_errors(opts.as_json):
        try:
            from stateward.temporal.worker import WorkerLimits
            from stateward.temporal.worker import run_worker as poll_temporal
        except ImportError as exc:
            raise UserError(
                f"a Temporal worker needs the temporal extra ({exc}): pip install 'stateward[temporal]'",
                code=ErrorCode.STORE_UNSUPPORTED,
            ) from None
        refuse_service_db(opts.db, opts.service_db)
        registry = agents if agents is not None else process_agents()
        limits = WorkerLimits(activities=opts.concurrency)
        ready = f"worker temporal:{os.getpid()}: {opts.concurrency} slot(s) on {opts.db}"
        if opts.service_db is None:
            ready += " (no --service-db: webhook notices are not recorded)"
        outbox = None if opts.service_db is None else _service_outbox(opts.service_db)
        try:
            notices = outbox if isinstance(outbox, WebhookStore) else None  # every store is one (_service_outbox)
            poll_temporal(opts.db, registry, stop=stop, ready=lambda: say(ready), limits=limits, outbox=notices)
        finally:
            if outbox is not None:
                outbox.close()
    say("worker stopped: temporal")
    return 0, {}


def _service_outbox(service_db: str) -> Store:
    """The service store whose webhooks the runs' notices fan out to (an existing one: it is never created)."""
    from stateward.store.backends import open_store

    store = open_store(service_db, create=False)
    if not isinstance(store, WebhookStore):
        store.close()
        raise UserError(f"{type(store).__name__} keeps no webhooks", code=ErrorCode.STORE_UNSUPPORTED)
    return store


def _metrics_endpoint(opts: WorkerOptions) -> MetricsEndpoint:
    from stateward.observability.prometheus import serve_metrics
    from stateward.store.backends import open_store

    assert opts.metrics_port is not None
    return serve_metrics(opts.metrics_port, lambda: open_store(opts.db, create=False), addr=opts.metrics_addr)


class _NotForUs(Exception):
    """The command line is not a plain, well-formed worker command: the Typer app handles it."""


class _StrictParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotForUs(message)


# option -> (WorkerOptions field, type, lowest, highest): the Typer command's ranges, checked alike.
_VALUED: dict[str, tuple[str, type, float | None, float | None]] = {
    "--db": ("db", str, None, None),
    "--concurrency": ("concurrency", int, 1, None),
    "--lease-ttl": ("lease_ttl", float, None, None),
    "--heartbeat": ("heartbeat", float, None, None),
    "--idle-exit": ("idle_exit", float, None, None),
    "--poll": ("poll", float, 0.01, None),
    "--expire-every": ("expire_every", float, 0.1, None),
    "--max-crashes": ("max_crashes", int, 1, None),
    "--crash-retries": ("crash_retries", int, 0, None),
    "--retry-delay": ("retry_delay", float, 0.001, None),
    "--metrics-port": ("metrics_port", int, 0, 65535),
    "--metrics-addr": ("metrics_addr", str, None, None),
    "--processes": ("processes", int, 1, MAX_PROCESSES),
    "--service-db": ("service_db", str, None, None),
}
_FLAGS = {"--async": "use_async", "--json": "as_json"}


def _parser() -> _StrictParser:
    parser = _StrictParser(prog="stateward worker", add_help=False, allow_abbrev=False)
    for option, (dest, kind, _, _) in _VALUED.items():
        parser.add_argument(option, dest=dest, type=kind)
    for option, dest in _FLAGS.items():
        parser.add_argument(option, dest=dest, action="store_true")
    return parser


def parse(argv: list[str]) -> WorkerOptions | None:
    """The options of ``stateward worker ARGV`` if this parser fully accepts them, else None."""
    if any(a in ("--help", "-h") or a.startswith("--help=") for a in argv):
        return None
    try:
        args = vars(_parser().parse_args(argv))
    except (_NotForUs, ValueError):
        return None
    for dest, _, low, high in _VALUED.values():
        value = args[dest]
        if value is not None and ((low is not None and value < low) or (high is not None and value > high)):
            return None  # Typer words the usage error
    given = {k: v for k, v in args.items() if v is not None and v is not False}
    given.setdefault("db", os.environ.get("STATEWARD_DB") or DEFAULT_DB)  # empty means unset, as in Typer
    if os.environ.get("STATEWARD_SERVICE_DB"):
        given.setdefault("service_db", os.environ["STATEWARD_SERVICE_DB"])
    return WorkerOptions(**given)


def run_fast(argv: list[str]) -> bool:
    """Run ``argv`` (``worker ...``) if it is a well-formed worker command; False leaves it to the Typer app."""
    if not argv or argv[0] != "worker":
        return False
    opts = parse(argv[1:])
    if opts is None:
        return False
    code = start_worker(opts)
    sys.stdout.flush()
    if code:
        raise SystemExit(code)
    return True
