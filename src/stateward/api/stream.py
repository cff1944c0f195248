"""A run's events as Server-Sent Events, resumable from ``Last-Event-ID`` and always bounded.

Each event is sent with ``id: <seq>``, so a reconnecting client that sends the last id it saw gets
only the events after it. The stream ends by itself: when the run is terminal (after its last
events), after ``idle_timeout_s`` without a new event, or after ``max_duration_s`` in all; a final
``event: end`` says why. A client reconnects to follow a run that outlives one stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from stateward.core.events import Event
from stateward.runtime.runtime import Runtime

STREAM_BATCH = 100


@dataclass(frozen=True)
class StreamLimits:
    """How long one event stream lives and how often it looks for new events."""

    idle_timeout_s: float = 15.0
    max_duration_s: float = 300.0
    poll_s: float = 0.25


def _frame(event: Event) -> str:
    data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.seq}\nevent: {event.type.value}\ndata: {data}\n\n"


def _end(reason: str, last: int) -> str:
    return f"event: end\ndata: {json.dumps({'reason': reason, 'last_event_id': last})}\n\n"


def event_stream(
    runtime: Runtime,
    run_id: str,
    tenant: str,
    after: int,
    limits: StreamLimits,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """SSE frames of the run's events numbered above ``after``, then ``end`` (terminal, idle or max_duration)."""
    started = idle_since = clock()
    last = after
    while True:
        # The status is read before the events: a terminal status is committed with its events, so the
        # read that follows holds every one of them.
        terminal = runtime.get(run_id).status.is_terminal
        events = runtime.events(run_id, last, limit=STREAM_BATCH, tenant=tenant)
        for event in events:
            yield _frame(event)
            last = event.seq
        if len(events) == STREAM_BATCH:
            continue
        if terminal:
            yield _end("terminal", last)
            return
        now = clock()
        if events:
            idle_since = now
        elif now - idle_since >= limits.idle_timeout_s:
            yield _end("idle", last)
            return
        if now - started >= limits.max_duration_s:
            yield _end("max_duration", last)
            return
        sleep(limits.poll_s)
