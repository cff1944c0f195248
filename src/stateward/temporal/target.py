"""Where a Temporal backend is: ``temporal://HOST:PORT/NAMESPACE?task_queue=Q`` parsed, or refused by name.

Free of the Temporal SDK, so choosing the backend by URL costs nothing until one is used.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict

from stateward.core.errors import ErrorCode, UserError

SCHEME = "temporal"
DEFAULT_PORT = 7233
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "stateward"


def is_temporal_url(url: str) -> bool:
    """Whether ``url`` names a Temporal backend."""
    return url.lower().startswith(f"{SCHEME}://")


def refuse_service_db(db: str, service_db: str | None) -> None:
    """A service store is a Temporal backend's alone: a store keeps its own keys and webhooks, and its steps write
    their notices beside them (a second store would hold subscriptions no step notifies)."""
    if service_db is not None and not is_temporal_url(db):
        raise UserError(
            "--service-db is for a temporal:// backend: a store keeps its own keys, sessions and webhooks",
            code=ErrorCode.SERVICE_STORE_UNEXPECTED,
        )
    if service_db is not None and is_temporal_url(service_db):
        raise UserError("--service-db names a store, not a Temporal backend", code=ErrorCode.SERVICE_STORE_UNEXPECTED)


class TemporalTarget(BaseModel):
    """A Temporal frontend (``host:port``), the namespace the runs live in and the task queue workers poll."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str
    port: int = DEFAULT_PORT
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    tls: bool = False  # TLS to the frontend (Temporal Cloud, a cluster behind TLS); credentials come from the env

    @property
    def address(self) -> str:
        """``host:port``, as the SDK's ``Client.connect`` takes it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL that names this target."""
        tls = "&tls=true" if self.tls else ""
        return f"{SCHEME}://{self.address}/{self.namespace}?task_queue={self.task_queue}{tls}"

    @classmethod
    def parse(cls, url: str) -> TemporalTarget:
        """``temporal://HOST[:PORT][/NAMESPACE][?task_queue=Q][&tls=true]``; CONFIGURATION_ERROR for anything else
        (a URL carries no secret: a user or password in it is refused, credentials come from the environment)."""
        if not is_temporal_url(url):
            raise _invalid(url, "it does not start with temporal://")
        parts = urlsplit(url)
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise _invalid(url, "its port is not a number from 0 to 65535") from None
        if not parts.hostname:
            raise _invalid(url, "it names no host")
        if parts.username is not None or parts.password is not None:
            raise _invalid(url, "it carries credentials (set STATEWARD_TEMPORAL_API_KEY or the TLS files instead)")
        namespace = parts.path.strip("/") or DEFAULT_NAMESPACE
        if "/" in namespace:
            raise _invalid(url, "a namespace holds no '/'")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"task_queue", "tls"})
        if unknown:
            raise _invalid(url, f"unknown parameters {unknown} (only task_queue and tls)")
        tls = (query.get("tls") or ["false"])[-1].strip().lower()
        if tls not in ("true", "false"):
            raise _invalid(url, "tls is true or false")
        queue = (query.get("task_queue") or [DEFAULT_TASK_QUEUE])[-1].strip()
        if not queue:
            raise _invalid(url, "task_queue is empty")
        return cls(host=parts.hostname, port=port, namespace=namespace, task_queue=queue, tls=tls == "true")


def _invalid(url: str, why: str) -> UserError:
    return UserError(
        f"not a Temporal URL ({why}): expected temporal://HOST:PORT/NAMESPACE?task_queue=QUEUE",
        code=ErrorCode.CONFIGURATION_ERROR,
        details={"url": url[:200]},
    )


_QUEUE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def version_queue(base: str, agent: str, version: str | None) -> str:
    """The task queue a run of ``agent`` recorded under ``version`` starts on: one per agent version, so a worker
    polls only the queues of the versions it builds (a run without a version stays on ``base``)."""
    if version is None:
        return base
    return f"{base}@{_QUEUE_UNSAFE.sub('_', agent)}@{_QUEUE_UNSAFE.sub('_', version)}"
