"""Event streams share one watch per run and bound what waits for a slow reader.

Through the library surface of the streams (``StreamHub.frames``) over a real SQLite store, with the
run moved through the HTTP API and the Runtime, as a worker would.
"""

from __future__ import annotations

import json

import anyio
import anyio.to_thread
import pytest
from tests.api.conftest import Service

from stateward.api.stream import StreamLimits
from stateward.api.stream_hub import StreamHub
from stateward.core.errors import ErrorCode, UserError

APPROVE = "/v1/runs/{run}/requests/approval_001/approve"


def ids(frames: list[bytes]) -> list[int]:
    return [int(line[4:]) for f in frames for line in f.decode().splitlines() if line.startswith("id: ")]


def end_of(frames: list[bytes]) -> dict[str, object]:
    last = frames[-1].decode()
    assert last.startswith("event: end\n"), last
    return dict(json.loads(last.split("data: ", 1)[1]))


def test_a_reader_that_falls_behind_is_dropped_with_a_final_event_and_resumes_from_it(service: Service) -> None:
    root = service.key("acme", "admin")
    run = service.waiting_run(root)
    waiting_at = service.runtime.store.last_seq(run)
    hub = StreamHub(service.runtime, StreamLimits(poll_s=0.02, queue_events=2, idle_timeout_s=5))

    def approve_and_drive() -> None:
        assert service.client.post(APPROVE.format(run=run), json={}, headers=root).status_code == 200
        service.runtime.drive(run)

    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes]]:
        slow = hub.frames(run, "acme", 0)
        taken = [await anext(slow)]  # the first event: this reader is now queued for every new one
        keen: list[bytes] = []

        async def read_all() -> None:
            keen.extend([frame async for frame in hub.frames(run, "acme", 0)])

        async with anyio.create_task_group() as group:
            group.start_soon(read_all)
            await anyio.to_thread.run_sync(approve_and_drive)  # the run moves while `slow` reads nothing
            await anyio.sleep(0.5)
            taken.extend([frame async for frame in slow])
        again = [frame async for frame in hub.frames(run, "acme", int(str(end_of(taken)["last_event_id"])))]
        return taken, keen, again

    taken, keen, again = anyio.run(scenario)
    end = service.runtime.store.last_seq(run)
    assert end - waiting_at > 2, "the run must move by more events than the reader's queue holds"
    # The slow reader got the events before the watch's position, then its queue (2), then the drop.
    assert ids(taken) == list(range(1, waiting_at + 3))
    assert end_of(taken) == {"reason": "slow_consumer", "last_event_id": waiting_at + 2}
    # A reader keeping up on the same watch got everything, and the end of the run.
    assert ids(keen) == list(range(1, end + 1)) and end_of(keen)["reason"] == "terminal"
    # Reconnecting from the last id the dropped reader saw gives the rest, once each.
    assert ids(again) == list(range(waiting_at + 3, end + 1)) and end_of(again)["reason"] == "terminal"
    assert hub._state is not None and hub._state.watches == {}  # no watch outlives its readers


def test_one_watch_per_run_however_many_read_it(service: Service) -> None:
    root = service.key("acme", "admin")
    runs = [service.waiting_run(root) for _ in range(2)]
    hub = StreamHub(service.runtime, StreamLimits(poll_s=0.02, idle_timeout_s=0.3))

    async def scenario() -> tuple[int, list[list[bytes]]]:
        streams = [hub.frames(runs[i % 2], "acme", 0) for i in range(6)]
        firsts = [[await anext(s)] for s in streams]
        assert hub._state is not None
        watched = len(hub._state.watches)
        for s, got in zip(streams, firsts, strict=True):
            got.extend([frame async for frame in s])
        return watched, firsts

    watched, streams = anyio.run(scenario)
    assert watched == 2
    for i, frames in enumerate(streams):
        assert ids(frames) == list(range(1, service.runtime.store.last_seq(runs[i % 2]) + 1))
        assert end_of(frames)["reason"] == "idle"


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"STATEWARD_MAX_STREAMS": "0"}, "max_streams"),
        ({"STATEWARD_MAX_STREAMS_PER_KEY": "-1"}, "max_streams_per_key"),
        ({"STATEWARD_STREAM_QUEUE_EVENTS": "many"}, "STATEWARD_STREAM_QUEUE_EVENTS"),
    ],
)
def test_stream_limits_from_the_environment_refuse_nonsense_by_name(env: dict[str, str], name: str) -> None:
    with pytest.raises(UserError) as refused:
        StreamLimits.from_env(env)
    assert refused.value.code is ErrorCode.CONFIGURATION_ERROR and name in refused.value.message
    limits = StreamLimits.from_env({"STATEWARD_MAX_STREAMS": "7", "STATEWARD_MAX_STREAMS_PER_KEY": "3"})
    assert (limits.max_streams, limits.max_streams_per_key) == (7, 3)
