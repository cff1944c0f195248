"""The operator's payload codec on Temporal: every payload a run sends to the cluster passes through it (nothing
of the run reads in clear in its history, listings included), and a process without it is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.temporal.codecs import SEALED, Sealed
from tests.temporal.conftest import cli, hosted_worker, wait_for
from tests.temporal.temporal_agents import registry

from stateward.core.errors import ErrorCode, UserError
from stateward.core.status import RunStatus
from stateward.temporal.client import TemporalRuntime
from stateward.temporal.codec import CODEC_ENV, codec_from_env, load_codec

pytestmark = [pytest.mark.temporal, pytest.mark.slow]
GOAL = "refund order A-1 of customer c-secret-42"


def _history(runtime: TemporalRuntime, run_id: str) -> bytes:
    """The run's latest execution's history as the cluster keeps it (its payloads not decoded)."""
    history = runtime._conn.run(runtime._conn.handle(run_id).fetch_history())
    return bytes(history.to_json(), "utf-8")


def test_a_codec_seals_every_payload_of_a_run_and_the_run_is_the_same(temporal_url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    runtime = TemporalRuntime.open(temporal_url, agents=registry, codec=Sealed())
    try:
        with hosted_worker(temporal_url, codec=Sealed()):
            state = runtime.start(registry.create("refunds", {"ledger": str(ledger)}), GOAL)
            assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None

            def listed() -> list[tuple[str, str | None]]:  # each run's memo, decoded through the codec
                rows = runtime.store.page_requests(limit=500).items
                return [(r.request.request_id, r.agent) for r in rows if r.run_id == state.run_id]

            wait_for(lambda: bool(listed()), "visibility to list the request")
            assert listed() == [(state.pending.request_id, "refunds")]
            done = runtime.approve(state.run_id, state.pending.request_id, by="alice")
            assert done.state.status is RunStatus.COMPLETED and len(ledger.read_text().split()) == 1
        history = _history(runtime, state.run_id)
        assert b"c-secret-42" not in history and b"refund_order" not in history  # neither goal nor tool in clear
        raw = runtime._conn.run(runtime._conn.handle(state.run_id).fetch_history())
        started = raw.events[0].workflow_execution_started_event_attributes
        assert [p.metadata["encoding"] for p in started.input.payloads] == [SEALED]
        assert runtime.get(state.run_id).status is RunStatus.COMPLETED  # an ended run's result, decoded

        def row() -> str | None:
            found = [r.status for r in runtime.store.list_runs(limit=500) if r.run_id == state.run_id]
            return found[0] if found else None

        wait_for(lambda: row() == "COMPLETED", "visibility to list the run ended")
    finally:
        runtime.close()


def test_a_process_without_the_namespaces_codec_is_refused_by_name(temporal_url: str, tmp_path: Path) -> None:
    runtime = TemporalRuntime.open(temporal_url, agents=registry, codec=Sealed())
    try:
        with hosted_worker(temporal_url, codec=Sealed()):
            state = runtime.start(registry.create("refunds", {"ledger": str(tmp_path / "ledger")}), GOAL)
            ended = runtime.cancel(state.run_id, by="alice")
            assert ended.status is RunStatus.CANCELLED
            handle = runtime._conn.handle(state.run_id)
            wait_for(lambda: runtime._conn.run(handle.describe()).close_time is not None, "its workflow to close")
    finally:
        runtime.close()
    refused = cli("runs", "show", state.run_id, "--db", temporal_url, "--json")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "CONFIGURATION_ERROR" and CODEC_ENV in error["message"]
    assert "Traceback" not in refused.stderr
    shown = cli(
        "runs", "show", state.run_id, "--db", temporal_url, "--json", env={CODEC_ENV: "tests.temporal.codecs:sealed"}
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert json.loads(shown.stdout)["status"] == "CANCELLED"


def test_a_codec_is_named_by_the_operator_as_module_and_attribute() -> None:
    assert isinstance(load_codec("tests.temporal.codecs:sealed"), Sealed)  # a factory of no arguments
    assert isinstance(load_codec("tests.temporal.codecs:one_sealed"), Sealed)  # an instance
    assert codec_from_env({}) is None and codec_from_env({CODEC_ENV: " "}) is None
    for spec in ("tests.temporal.codecs:not_a_codec", "tests.temporal.no_such_module:x", "no-colon", ":x"):
        with pytest.raises(UserError) as refused:
            load_codec(spec)
        assert refused.value.code is ErrorCode.CONFIGURATION_ERROR, spec
