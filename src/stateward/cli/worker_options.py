"""``stateward worker``'s options, in a module of their own: the command (worker_cmd.py) and the forking
supervisor (prefork.py) both read them, and neither imports the other for them."""

from __future__ import annotations

from dataclasses import dataclass

from stateward.cli import DEFAULT_DB


@dataclass(frozen=True)
class WorkerOptions:
    """The worker's command-line options (their help is the Typer command's, ``stateward worker --help``)."""

    db: str = DEFAULT_DB
    concurrency: int = 1
    use_async: bool = False
    lease_ttl: float = 30.0
    heartbeat: float = 10.0
    idle_exit: float | None = None
    poll: float = 0.2
    expire_every: float = 5.0
    max_crashes: int | None = None
    crash_retries: int = 3
    retry_delay: float = 5.0
    as_json: bool = False
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    processes: int = 1
    service_db: str | None = None
