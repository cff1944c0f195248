"""Event streams open up to the caps do not stall the service (issue 31 item 3).

The real service (``stateward serve`` in its own process, on a loopback port) with the caps set small
through the environment: three viewers' keys hold 20 streams each until the global cap of 60 is
reached, spread over several waiting runs. While they are all open, ``/healthz`` and
``GET /v1/runs/{id}`` must keep answering, their p99 held against a baseline measured in the same test
with no stream open (never an absolute wall-clock number). Past the per-key cap and past the global cap
a stream is 429 with ``Retry-After`` and the code naming the cap; a closed stream's slot is given back.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from tests.api.agents_for_api import agents

from stateward.api import mint_key
from stateward.api.app import key_store
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore

GLOBAL_CAP, PER_KEY_CAP, STREAM_KEYS, RUNS = 60, 20, 3, 6
SAMPLES = 60  # of each route, with and without the streams open
FLOOR_S = 0.5  # the p99 allowed under load is max(10 x the baseline p99, this)
ANSWER_WITHIN_S = 5.0  # a request not answered in this long counts as unanswered


class Served(NamedTuple):
    base: str
    tokens: list[str]  # STREAM_KEYS viewers' keys that fill the caps, then one that has opened nothing
    runs: list[str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepared_store(db: Path) -> tuple[list[str], list[str]]:
    """Viewers' keys and runs waiting for an approval (so their streams stay open), made through the library."""
    runtime = Runtime(SQLiteStore(db), agents=agents)
    try:
        tokens = [
            mint_key(key_store(runtime), tenant="acme", name=f"viewer{i}", roles=["viewer"], now=datetime.now(UTC))[1]
            for i in range(STREAM_KEYS + 1)
        ]
        runs = []
        for i in range(RUNS):
            state = runtime.submit(runtime.agents.create("payer", {"invoice": f"INV-{i}"}), "pay", tenant="acme")
            runs.append(runtime.drive(state.run_id).run_id)
        return tokens, runs
    finally:
        runtime.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    db = tmp_path / "load.db"
    tokens, runs = prepared_store(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWARD_")}
    env |= {
        "STATEWARD_MAX_STREAMS": str(GLOBAL_CAP),
        "STATEWARD_MAX_STREAMS_PER_KEY": str(PER_KEY_CAP),
        "STATEWARD_STREAM_IDLE_S": "120",  # the streams outlive the test unless it closes them
    }
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")  # a file, not a pipe: the access log must never fill a buffer
    server = subprocess.Popen(
        [sys.executable, "-m", "stateward.cli.main", "serve", "--db", str(db), "--port", str(port)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the service did not start in 30 s"
            time.sleep(0.1)
        yield Served(base, tokens, runs)
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
        log.close()


class Stream:
    """One SSE connection on a bare socket (sixty of them cost the test no thread): open until closed."""

    def __init__(self, base: str, token: str, run: str):
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        request = (
            f"GET /v1/runs/{run}/events/stream HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        seen = b""
        while b"\r\n\r\n" not in seen:
            seen += self._more(seen)
        self.status = int(seen.split(b" ", 2)[1])
        while self.status == 200 and b"\nid: 1\n" not in seen:  # the run's first event
            seen += self._more(seen)

    def _more(self, seen: bytes) -> bytes:
        chunk = self.sock.recv(65536)
        assert chunk, f"the connection closed early: {seen[:300]!r}"
        return chunk

    def close(self) -> None:
        self.sock.close()


def opened(base: str, token: str, run: str) -> Stream:
    stream = Stream(base, token, run)
    assert stream.status == 200, stream.status
    return stream


def opens(base: str, token: str, run: str, *, within_s: float = 10.0) -> Stream:
    """A stream that succeeds once a slot is free (a closed connection's slot comes back within moments)."""
    deadline = time.monotonic() + within_s
    while True:
        stream = Stream(base, token, run)
        if stream.status == 200:
            return stream
        stream.close()
        assert stream.status == 429, stream.status
        assert time.monotonic() < deadline, "a closed stream's slot was never given back"
        time.sleep(0.05)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def timed(client: httpx.Client, path: str, token: str) -> dict[str, list[float]]:
    """SAMPLES of each route, interleaved; every one must be answered with a 200."""
    took: dict[str, list[float]] = {"/healthz": [], path: []}
    for _ in range(SAMPLES):
        for route, headers in (("/healthz", {}), (path, {"Authorization": f"Bearer {token}"})):
            started = time.perf_counter()
            try:
                response = client.get(route, headers=headers)
            except httpx.TimeoutException:
                raise AssertionError(f"{route} unanswered for {ANSWER_WITHIN_S} s") from None
            took[route].append(time.perf_counter() - started)
            assert response.status_code == 200, (route, response.status_code, response.text[:300])
    return took


def refused(base: str, token: str, run: str) -> tuple[str, int]:
    """The code and Retry-After of a stream that must be refused (a stream that opens instead is closed)."""
    url, headers = f"{base}/v1/runs/{run}/events/stream", {"Authorization": f"Bearer {token}"}
    with httpx.stream("GET", url, headers=headers, timeout=ANSWER_WITHIN_S) as response:
        assert response.status_code == 429, f"a stream past a cap was {response.status_code}, not 429"
        response.read()
        return str(response.json()["error"]["code"]), int(response.headers["Retry-After"])


@pytest.mark.slow
def test_health_and_run_reads_stay_answered_with_every_stream_slot_taken(served: Served) -> None:
    started = time.monotonic()
    base, tokens, runs = served
    path = f"/v1/runs/{runs[0]}"
    streams: list[list[Stream]] = [[] for _ in tokens]
    try:
        with httpx.Client(base_url=base, timeout=ANSWER_WITHIN_S) as client:
            timed(client, path, tokens[-1])  # warm both routes and the connection
            baseline = timed(client, path, tokens[-1])

            # Up to the per-key cap for the first key; one more of its own is refused by that cap's name.
            for i in range(PER_KEY_CAP):
                streams[0].append(opened(base, tokens[0], runs[i % RUNS]))
            per_key = refused(base, tokens[0], runs[0])
            # The other keys fill the service to the global cap; a key with none open is refused by that one.
            for k in range(1, STREAM_KEYS):
                for i in range(PER_KEY_CAP):
                    streams[k].append(opened(base, tokens[k], runs[i % RUNS]))
            assert sum(map(len, streams)) == GLOBAL_CAP
            full = refused(base, tokens[-1], runs[1])

            loaded = timed(client, path, tokens[-1])

        for route in baseline:
            before, under = p99(baseline[route]), p99(loaded[route])
            bound = max(10 * before, FLOOR_S)
            print(f"{route}: p99 {before * 1000:.1f} ms with no stream, {under * 1000:.1f} ms with {GLOBAL_CAP} open")
            assert under <= bound, (
                f"{route} p99 {under * 1000:.1f} ms with {GLOBAL_CAP} streams open, over the bound "
                f"{bound * 1000:.1f} ms (baseline p99 {before * 1000:.1f} ms, {SAMPLES} samples)"
            )

        assert per_key[0] == "STREAM_LIMIT_PER_KEY" and per_key[1] > 0, per_key
        assert full[0] == "STREAM_LIMIT" and full[1] > 0, full

        # A closed stream gives its slot back: the key that was refused for the global cap now gets one.
        streams[1].pop().close()
        streams[-1].append(opens(base, tokens[-1], runs[1]))
        # And a key's own slots come back: all of the first key's closed, it opens a full set again.
        for s in streams[0]:
            s.close()
        streams[0] = [opens(base, tokens[0], runs[i % RUNS]) for i in range(PER_KEY_CAP)]
        extra = Stream(base, tokens[0], runs[0])
        extra.close()
        assert extra.status == 429  # and no more than a full set
    finally:
        for group in streams:
            for s in group:
                s.close()
    assert time.monotonic() - started < 30, "the load test must stay bounded in time"
