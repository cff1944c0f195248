"""A run's events as Server-Sent Events: the frames, and the bounds an operator sets on streams.

Each event is sent with ``id: <seq>``, so a reconnecting client that sends the last id it saw gets
only the events after it. A stream ends by itself with a final ``event: end`` saying why: the run is
terminal (after its last events), ``idle_timeout_s`` passed without a new event, ``max_duration_s``
passed in all, the client read so slowly that ``queue_events`` events waited for it
(``slow_consumer``), or the store stopped answering (``store_unavailable``). A client reconnects with
``Last-Event-ID`` to follow a run that outlives one stream. How streams are served (one shared poll
per watched run, no thread held per stream) is in ``stream_hub.py``; the caps in ``stream_slots.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum

from stateward.core.errors import ErrorCode, UserError
from stateward.core.events import Event

STREAM_BATCH = 100


class EndReason(StrEnum):
    """Why a stream ended, as its final ``event: end`` says: the client may reconnect after each but ``terminal``."""

    TERMINAL = "terminal"
    IDLE = "idle"
    MAX_DURATION = "max_duration"
    SLOW_CONSUMER = "slow_consumer"
    STORE_UNAVAILABLE = "store_unavailable"


@dataclass(frozen=True)
class StreamLimits:
    """How long one event stream lives, how often the store is polled for it, and how many may be open.

    ``max_streams`` caps the streams open in this process, ``max_streams_per_key`` those of one principal
    (an API key, or one OIDC subject); past either a stream is 429 with ``Retry-After: retry_after_s``.
    ``queue_events`` bounds what waits for one slow reader; ``send_timeout_s`` closes a connection whose
    client takes nothing for that long; ``keepalive_s`` sends an SSE comment so proxies keep an idle
    stream open (0: none); ``store_threads`` bounds the threads streams may use for store reads at once,
    apart from the ones ordinary routes run on.
    """

    idle_timeout_s: float = 15.0
    max_duration_s: float = 300.0
    poll_s: float = 0.25
    max_streams: int = 200
    max_streams_per_key: int = 20
    queue_events: int = 1000
    send_timeout_s: float = 30.0
    keepalive_s: float = 10.0
    retry_after_s: int = 5
    store_threads: int = 4

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            kinds = int if spec.type == "int" else int | float
            if (
                isinstance(value, bool)
                or not isinstance(value, kinds)
                or value < 0
                or (value == 0 and spec.name != "keepalive_s")
            ):
                raise UserError(
                    f"stream limit {spec.name} must be a positive number, not {value!r}",
                    code=ErrorCode.CONFIGURATION_ERROR,
                )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StreamLimits:
        """The defaults, overridden by ``STATEWARD_MAX_STREAMS``, ``STATEWARD_MAX_STREAMS_PER_KEY``,
        ``STATEWARD_STREAM_IDLE_S``, ``STATEWARD_STREAM_MAX_S`` and ``STATEWARD_STREAM_QUEUE_EVENTS``."""
        env = os.environ if env is None else env
        given: dict[str, float | int] = {}
        for name, field_name, kind in _ENV_FIELDS:
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                given[field_name] = kind(raw)
            except ValueError:
                raise UserError(
                    f"{name} must be a number, not {raw[:40]!r}", code=ErrorCode.CONFIGURATION_ERROR
                ) from None
        return cls(**given)  # type: ignore[arg-type]


_ENV_FIELDS: tuple[tuple[str, str, type[int] | type[float]], ...] = (
    ("STATEWARD_MAX_STREAMS", "max_streams", int),
    ("STATEWARD_MAX_STREAMS_PER_KEY", "max_streams_per_key", int),
    ("STATEWARD_STREAM_IDLE_S", "idle_timeout_s", float),
    ("STATEWARD_STREAM_MAX_S", "max_duration_s", float),
    ("STATEWARD_STREAM_QUEUE_EVENTS", "queue_events", int),
)


def event_frame(event: Event) -> bytes:
    """One event as an SSE frame: ``id`` is its number, ``event`` its type, ``data`` its JSON."""
    data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.seq}\nevent: {event.type.value}\ndata: {data}\n\n".encode()


def end_frame(reason: EndReason, last: int) -> bytes:
    """The stream's last frame: why it ended, and the ``Last-Event-ID`` to reconnect with."""
    return f"event: end\ndata: {json.dumps({'reason': reason.value, 'last_event_id': last})}\n\n".encode()
