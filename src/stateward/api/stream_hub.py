"""Event streams served from the event loop: one shared poll per watched run, fanned out to its readers.

A stream used to be a sync generator that slept between polls on a request thread, so forty of them
held every thread the sync routes run on and ``/healthz`` waited behind them. Here a stream is an
async generator and holds no thread and no store connection: one *watch* per (run, tenant) being
followed polls the store (a cheap ``last_seq`` each ``poll_s``; the run's status and its new events
only when it moved) and puts each new frame in every reader's bounded queue. The store reads run on
at most ``store_threads`` threads of their own, so streams never take the threads ordinary routes
use. A reader whose queue is full (it reads slower than the run moves) is dropped: it sends what it
has, then ``end`` with ``slow_consumer`` and the ``Last-Event-ID`` to reconnect with. PostgreSQL is
polled the same way as SQLite (no LISTEN/NOTIFY): one cheap query per watched run per ``poll_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse, SendTimeoutError
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from stateward.api.backend import RunBackend
from stateward.api.errors import error_body
from stateward.api.identity import Principal
from stateward.api.stream import STREAM_BATCH, EndReason, StreamLimits, end_frame, event_frame
from stateward.api.stream_slots import Slot, StreamRefused, StreamSlots

log = logging.getLogger("stateward.streams")
T = TypeVar("T")
Frame = tuple[int, bytes]  # (event number, its SSE frame)


class _Reader:
    """One stream's queue of frames the watch fetched and the stream has not sent yet."""

    def __init__(self, capacity: int):
        self.inbox: MemoryObjectSendStream[Frame]
        self.outbox: MemoryObjectReceiveStream[Frame]
        self.inbox, self.outbox = anyio.create_memory_object_stream[Frame](capacity)
        self.ended: EndReason | None = None

    def offer(self, frame: Frame) -> bool:
        """Queue without waiting; False when the queue is full (the watch then drops this reader)."""
        try:
            self.inbox.send_nowait(frame)
        except anyio.WouldBlock:
            return False
        return True

    async def take(self, timeout_s: float) -> Frame | None:
        """The next frame, None after ``timeout_s``; EndOfStream once ended and drained."""
        with anyio.move_on_after(timeout_s):
            return await self.outbox.receive()
        return None

    def end(self, reason: EndReason) -> None:
        """No more frames: the stream sends what is queued, then ``end`` with ``reason``."""
        if self.ended is None:
            self.ended = reason
        self.inbox.close()

    def close(self) -> None:
        self.inbox.close()
        self.outbox.close()


class _Watch:
    """The one poller of a run that streams follow; ``last`` is the newest event it has fanned out."""

    def __init__(self, hub: StreamHub, run_id: str, tenant: str):
        self.hub = hub
        self.run_id = run_id
        self.tenant = tenant
        self.readers: set[_Reader] = set()
        self.holders = 0  # streams using this watch (registered readers, and ones still waiting for `ready`)
        self.last = 0
        self.ready = anyio.Event()
        self.finished: EndReason | None = None
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Find where the run is, then follow it until it is terminal (or the last stream leaves)."""
        try:
            terminal, self.last = await self.hub.read(self._position)
            if not terminal:
                self.ready.set()
                await self._follow()
            self._finish(EndReason.TERMINAL)
        except Exception as exc:  # the store failed: every reader ends and may reconnect
            log.warning("event stream of run %s: the store does not answer (%s)", self.run_id, type(exc).__name__)
            self._finish(EndReason.STORE_UNAVAILABLE)
        finally:
            self.hub._forget(self)
            self._finish(EndReason.STORE_UNAVAILABLE)  # cancelled: nobody is left waiting, but end them all
            self.ready.set()

    def _position(self) -> tuple[bool, int]:
        # The status is read before the last number: a terminal status is committed with its events.
        terminal = self.hub.runtime.get(self.run_id).status.is_terminal
        return terminal, self.hub.runtime.store.last_seq(self.run_id)

    async def _follow(self) -> None:
        poll_s = self.hub.limits.poll_s
        moved = False
        while True:
            await anyio.sleep(poll_s)
            seq = await self.hub.read(lambda: self.hub.runtime.store.last_seq(self.run_id))
            if seq <= self.last and not moved:
                continue
            # The status before the events again; and once more after any tick that found events, since
            # the run may have ended after the status was read (its last events are then in this page).
            terminal = await self.hub.read(lambda: self.hub.runtime.get(self.run_id).status.is_terminal)
            moved = await self._fan_out()
            if terminal:
                return

    async def _fan_out(self) -> bool:
        """Fetch every event after ``last`` a page at a time and queue it for every reader. A page is never
        longer than a reader's queue, and the read of the next one lets readers send: only a reader that
        falls a whole queue behind is dropped, never one that keeps up with a burst."""
        found, page = False, self.hub.fan_out_page
        while True:
            frames = await self.hub.read(lambda: self.hub.page(self.run_id, self.tenant, self.last, page))
            for frame in frames:
                for reader in list(self.readers):
                    if not reader.offer(frame):
                        self.readers.discard(reader)
                        reader.end(EndReason.SLOW_CONSUMER)
                self.last = frame[0]
            found = found or bool(frames)
            if len(frames) < page:
                return found

    def _finish(self, reason: EndReason) -> None:
        if self.finished is None:
            self.finished = reason
        for reader in self.readers:
            reader.end(self.finished)
        self.readers.clear()


@dataclass
class _LoopState:
    """What belongs to one event loop: the watches, their tasks and the thread limiter."""

    loop: asyncio.AbstractEventLoop
    limiter: anyio.CapacityLimiter
    watches: dict[tuple[str, str], _Watch] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class StreamHub:
    """Every event stream of one app: the caps (``slots``), the watches, and the frames of each stream."""

    def __init__(self, runtime: RunBackend, limits: StreamLimits, *, clock: Callable[[], float] = time.monotonic):
        self.runtime = runtime
        self.limits = limits
        self.slots = StreamSlots(limits.max_streams, limits.max_streams_per_key, retry_after_s=limits.retry_after_s)
        self._clock = clock
        self._state: _LoopState | None = None
        self.fan_out_page = min(STREAM_BATCH, limits.queue_events)

    def response(self, run_id: str, who: Principal, after: int) -> Response:
        """The stream of ``run_id`` (already checked visible to ``who``) from ``after``, or 429 past a cap."""
        try:
            slot = self.slots.take((who.tenant, who.subject))
        except StreamRefused as exc:
            return JSONResponse(
                error_body(exc.code, exc.message), status_code=429, headers={"Retry-After": str(exc.retry_after_s)}
            )
        return _SlotStream(self.frames(run_id, who.tenant, after), slot, self.limits)

    async def frames(self, run_id: str, tenant: str, after: int) -> AsyncIterator[bytes]:
        """SSE frames of the run's events numbered above ``after``, then ``end`` (see stream.py)."""
        limits, clock = self.limits, self._clock
        started = idle_since = clock()
        watch = self._watch(run_id, tenant)
        reader = _Reader(limits.queue_events)
        watch.holders += 1
        try:
            if not watch.ready.is_set():
                await watch.ready.wait()
            upto = watch.last  # the watch queues for this reader every event after `upto`, from now on
            if watch.finished is None:
                watch.readers.add(reader)
            else:
                reader.end(watch.finished)
            last = after
            while last < upto:  # what came before the watch's position, read for this stream alone
                frames = await self._before(run_id, tenant, last, upto)
                if frames is None:
                    yield end_frame(EndReason.STORE_UNAVAILABLE, last)
                    return
                for seq, frame in frames:
                    yield frame
                    last, idle_since = seq, clock()
                if len(frames) < STREAM_BATCH:
                    break
            last = max(last, after)
            while True:
                now = clock()
                left = min(idle_since + limits.idle_timeout_s, started + limits.max_duration_s) - now
                if left <= 0:
                    timed_out = now - started >= limits.max_duration_s
                    yield end_frame(EndReason.MAX_DURATION if timed_out else EndReason.IDLE, last)
                    return
                try:
                    got = await reader.take(left)
                except anyio.EndOfStream:
                    yield end_frame(reader.ended or EndReason.STORE_UNAVAILABLE, last)
                    return
                if got is not None and got[0] > last:
                    yield got[1]
                    last, idle_since = got[0], clock()
        finally:
            watch.readers.discard(reader)
            reader.close()
            watch.holders -= 1
            if watch.holders == 0:
                self._stop(watch)

    async def _before(self, run_id: str, tenant: str, after: int, upto: int) -> list[Frame] | None:
        """A page of the events after ``after`` up to ``upto`` (None if the store failed)."""
        try:
            frames = await self.read(lambda: self.page(run_id, tenant, after, STREAM_BATCH))
        except Exception:
            log.warning("event stream of run %s: the store does not answer", run_id)
            return None
        return [frame for frame in frames if frame[0] <= upto]

    def page(self, run_id: str, tenant: str, after: int, limit: int) -> list[Frame]:
        """Up to ``limit`` frames of events after ``after`` (on a stream thread: encoding is CPU too)."""
        return [(e.seq, event_frame(e)) for e in self.runtime.events(run_id, after, limit=limit, tenant=tenant)]

    async def read(self, work: Callable[[], T]) -> T:
        """Run a store read on one of the streams' own threads (at most ``store_threads`` at once)."""
        return await anyio.to_thread.run_sync(work, limiter=self._loop_state().limiter)

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:  # a new loop (a test client's) starts afresh
            self._state = _LoopState(loop, anyio.CapacityLimiter(self.limits.store_threads))
        return self._state

    def _watch(self, run_id: str, tenant: str) -> _Watch:
        state = self._loop_state()
        watch = state.watches.get((run_id, tenant))
        if watch is None:
            watch = state.watches[(run_id, tenant)] = _Watch(self, run_id, tenant)
            watch.task = task = state.loop.create_task(watch.run(), name=f"stateward-stream-watch-{run_id}")
            state.tasks.add(task)
            task.add_done_callback(state.tasks.discard)
        return watch

    def _stop(self, watch: _Watch) -> None:
        """The last stream of the watch left: forget it at once (a new stream starts a new one) and stop it."""
        self._forget(watch)
        if watch.task is not None:
            watch.task.cancel()

    def _forget(self, watch: _Watch) -> None:
        state = self._state
        if state is not None and state.watches.get((watch.run_id, watch.tenant)) is watch:
            del state.watches[(watch.run_id, watch.tenant)]


class _SlotStream(EventSourceResponse):
    """An SSE response that holds its stream's slot until the connection ends, however it ends."""

    def __init__(self, frames: AsyncIterator[bytes], slot: Slot, limits: StreamLimits):
        super().__init__(
            frames,
            headers={"Cache-Control": "no-store"},
            sep="\n",
            ping=limits.keepalive_s,
            ping_message_factory=lambda: ServerSentEvent(comment="keep-alive", sep="\n"),
            send_timeout=limits.send_timeout_s,
        )
        self._slot = slot
        self._send_timeout_s = limits.send_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:  # the server closes the connection when we return unfinished
            log.warning(
                "an event stream's client took nothing for %s s: its connection is closed", self._send_timeout_s
            )
        finally:
            self._slot.release()
