"""Trace hygiene: events keep ids, hashes and sizes; a large value lives in an artifact named by its hash,
and whoever needs it back (a controller's observations on resume) gets exactly the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from stateward import Agent, AgentRegistry, ReActController, RunStatus, Runtime, ToolRegistry, tool
from stateward.cli.app import app as cli_app
from stateward.core.canonical import compact_json, sha256_hex
from stateward.core.events import EventType, NewEvent
from stateward.models.base import ModelRequest
from stateward.observability.payloads import PREFIX, Offloader, compacted, is_ref, with_defaults
from stateward.testing import ScriptedModel
from stateward_demos.cli import app as demo_app

BIG = "x" * 5000


@tool
def fetch(page: int) -> dict[str, Any]:
    """A large result."""
    return {"page": page, "body": BIG}


@tool(side_effect=True, requires_approval=True)
def publish(text: str) -> str:
    """A large argument (guarded, so the run stops in between)."""
    return f"published {len(text)} chars"


SEEN: list[list[dict[str, Any]]] = []


def policy(request: ModelRequest) -> dict[str, Any]:
    SEEN.append([dict(o) for o in request.observations])
    done = [o["action"] for o in request.observations]
    if "fetch" not in done:
        return {"type": "EXECUTE_TOOL", "action": "fetch", "args": {"page": 1}}
    if "publish" not in done:
        return {"type": "EXECUTE_TOOL", "action": "publish", "args": {"text": "y" * 3000}}
    return {"type": "FINISH", "reason": "done"}


def agent() -> Agent:
    return Agent(name="bulky", controller=ReActController(ScriptedModel(policy)), tools=ToolRegistry([fetch, publish]))


AGENTS = AgentRegistry()
AGENTS.register("bulky", agent)


def test_large_values_leave_the_log_for_artifacts_and_come_back_on_resume(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    first = Runtime.open(db, agents=AGENTS)
    run = first.start(agent(), "publish the page")
    assert run.status is RunStatus.WAITING_FOR_USER
    events = first.store.read_events(run.run_id)
    assert max(len(compact_json(e.payload)) for e in events) < 1500
    attempted = next(e for e in events if e.type is EventType.TOOL_ATTEMPTED)
    ref = attempted.payload["observation"]["result"]
    assert is_ref(ref) and ref["bytes"] == len(compact_json({"page": 1, "body": BIG}))
    assert attempted.payload["observation"]["action"] == "fetch"  # ids and names stay in the event
    digest = ref["$payload"].removeprefix("sha256:")
    stored = first.artifact(run.run_id, PREFIX + digest)
    assert sha256_hex(stored.content) == digest == stored.sha256
    assert json.loads(stored.content) == {"page": 1, "body": BIG}
    assert all(not a.name.startswith(PREFIX) for a in first.artifacts(run.run_id))  # not a product
    first.close()

    SEEN.clear()
    second = Runtime.open(db, agents=AGENTS)  # a new process: observations rebuilt from the log
    done = second.approve(run.run_id, "approval_001", by="ann").state
    assert done.status is RunStatus.COMPLETED
    fetched = next(o for o in SEEN[-1] if o["action"] == "fetch")
    assert fetched["result"] == {"page": 1, "body": BIG}
    published = next(o for o in SEEN[-1] if o["action"] == "publish")
    assert published["args"] == {"text": "y" * 3000}
    second.close()


TRACE_LIMIT = 100_000  # bytes: issue 14's bound on the payment run's trace


def _trace(db: str, run_id: str) -> tuple[int, list[dict[str, Any]]]:
    """``stateward trace RUN --json`` as a user runs it: the bytes it prints and the rows they hold."""
    result = CliRunner().invoke(cli_app, ["trace", run_id, "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    return len(result.stdout.encode()), json.loads(result.stdout)


def test_the_payment_runs_trace_fits_in_100_kb_and_keeps_ids_and_hashes(tmp_path: Path) -> None:
    db = str(tmp_path / "pm.db")
    demo = CliRunner().invoke(demo_app, ["payment-migration", "--db", db, "--json"])
    assert demo.exit_code == 0, demo.output
    run_id = json.loads(demo.stdout)["run_id"]
    waiting, rows = _trace(db, run_id)
    answered = CliRunner().invoke(cli_app, ["approve", run_id, "approval_001", "--db", db, "--json"])
    assert answered.exit_code == 0, answered.output
    done, rows = _trace(db, run_id)
    biggest = max(len(compact_json(r["payload"])) for r in rows)
    print(f"payment trace: waiting {waiting} B, completed {done} B ({len(rows)} events), largest payload {biggest} B")
    # 379 KB at first, 122 KB (compact; 179 KB as printed) with references and the call recorded once; 99.8 KB
    # before the code-run items (no react_decision notes for them), 87.7 KB after (batches included).
    assert waiting <= TRACE_LIMIT and done <= TRACE_LIMIT
    assert biggest <= 1200  # was 20 KB: single payloads over the threshold are references now
    assert rows[-1]["payload"]["status"] == "COMPLETED"

    by_step: dict[int, dict[str, dict[str, Any]]] = {}
    step = 0
    for row in rows:  # a step's events: the decision note, then its signal, validation and tool attempt
        if row["type"] == "signal_received":
            step = row["payload"]["step"]
        by_step.setdefault(step + (row["type"] == "react_decision"), {})[row["type"]] = row["payload"]
    decisions = [(s, e["react_decision"]) for s, e in by_step.items() if "react_decision" in e]
    assert len(decisions) >= 15  # the model items' decisions (RULE, TOOL and VERIFICATION items run as code)
    observed = {p["observation"]["step"] for r in rows if r["type"] == "tool_attempted" for p in [r["payload"]]}
    for s, decision in decisions:
        assert "selected_action" not in decision and "decision_id" not in decision  # their step holds them
        attempted = by_step[s]["tool_attempted"]
        assert attempted["observation"]["step"] == s and "args" in attempted["observation"]
        assert attempted["idempotency_key"].startswith("idem_")  # ids stay in the event
        assert set(decision.get("observation_refs", ())) <= observed  # what it saw, by step, each recorded
    firsts = {d["work_item_id"] for _, d in decisions if "objective" in d}
    assert firsts == {d["work_item_id"] for _, d in decisions}  # each item's objective is still recorded
    assert sum("objective" in d for _, d in decisions) < len(decisions) / 2  # but not on every decision
    for row in rows:  # a reference names its content by hash and size
        if row["type"] == "artifact_written":
            assert len(row["payload"]["sha256"]) == 64


def test_compaction_leaves_out_only_what_a_reader_assumes() -> None:
    attempted = NewEvent(
        type=EventType.TOOL_ATTEMPTED,
        payload={
            "observation": {"step": 3, "action": "fetch", "args": {}, "status": "SUCCESS"},
            "runtime_action": "EXECUTE",
            "idempotency_key": "idem_1",
            "attempts": 1,
            "handler_calls": 1,
            "idempotency_status": None,
        },
    )
    stored = compacted(attempted).payload
    kept = {"observation": attempted.payload["observation"], "idempotency_key": "idem_1", "idempotency_status": None}
    assert stored == kept
    assert with_defaults(EventType.TOOL_ATTEMPTED, stored) == attempted.payload
    retried = {**attempted.payload, "runtime_action": "RETRY_ONCE", "attempts": 2, "handler_calls": 0}
    assert compacted(NewEvent(type=EventType.TOOL_ATTEMPTED, payload=retried)).payload == retried
    assert compacted(NewEvent(type=EventType.SIGNAL_RECEIVED, payload={"model_calls": True})).payload == {
        "model_calls": True
    }  # a default is matched by type as well as value
    started = NewEvent(
        type=EventType.WORK_ITEM_STARTED,
        payload={"work_item_id": "W1", "attempt": 2, "reserved": {"tool_calls": 0, "tokens": 400}},
    )
    assert compacted(started).payload == {"work_item_id": "W1", "attempt": 2, "reserved": {"tokens": 400}}
    # A type without defaults still leaves its zero amounts out, and keeps everything else as it was.
    ended = NewEvent(type=EventType.WORK_ITEM_ENDED, payload={"work_item_id": "W1", "reserved": {"tokens": 0}})
    assert compacted(ended).payload == {"work_item_id": "W1", "reserved": {}}
    validated = NewEvent(type=EventType.RUNTIME_VALIDATED, payload={"runtime_decision": "accepted", "attempts": 1})
    assert compacted(validated).payload == {"runtime_decision": "accepted", "attempts": 1}


def test_content_inside_a_record_leaves_the_event_however_small_the_record(tmp_path: Path) -> None:
    offloader = Offloader()
    text = "z" * 200
    observation = {"step": 1, "action": "a", "args": {"t": text}}
    [event] = offloader.events([NewEvent(type=EventType.ACTION_REFUSED, payload={"observation": observation})])
    ref = event.payload["observation"]["args"]
    assert is_ref(ref) and event.payload["observation"]["action"] == "a"
    assert json.loads(offloader.blobs[ref["$payload"].removeprefix("sha256:")]) == {"t": text}


def test_an_event_within_the_threshold_keeps_all_but_its_large_content() -> None:
    offloader = Offloader()
    checks = [{"id": "c1", "detail": "y" * 150}, {"id": "c2", "detail": "ok"}]
    small = NewEvent(type=EventType.ACTION_REFUSED, payload={"observation": {"step": 1, "result": {"n": 1}}})
    [checked, kept] = offloader.events([NewEvent(type=EventType.ACTION_REFUSED, payload={"checks": checks}), small])
    first, second = checked.payload["checks"]
    assert is_ref(first["detail"]) and first["id"] == "c1" and second == checks[1]  # content in a list of records
    assert kept is small and list(offloader.blobs.values()) == [compact_json("y" * 150)]
