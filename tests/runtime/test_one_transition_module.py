"""Only the Runtime changes a run's status, and in the code that is one module: runtime/transition.py
alone moves a status through the table (``next_status``), builds the events that record a move
(state_transition, pending_recorded, run_exited) and counts issued requests (``requests_issued``,
which mints request ids). Everything else calls its named operations.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import stateward

SRC = Path(stateward.__file__).parent
THE_MODULE = SRC / "runtime" / "transition.py"
TABLE = SRC / "core" / "status.py"  # defines next_status and the table itself
MOVE_EVENTS = {"STATE_TRANSITION", "PENDING_RECORDED", "RUN_EXITED"}


def moves_in(source: str, filename: str) -> list[str]:
    """Status changes made in ``source``: a next_status call, an event recording a move, or a state
    copied with a new status or request count."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "next_status":
            found.append(f"{filename}:{node.lineno} next_status")
        for kw in node.keywords:
            if kw.arg == "type" and isinstance(kw.value, ast.Attribute) and kw.value.attr in MOVE_EVENTS:
                found.append(f"{filename}:{node.lineno} builds {kw.value.attr}")
            if name == "model_copy" and kw.arg == "update" and isinstance(kw.value, ast.Dict):
                found += [f"{filename}:{node.lineno} sets {key}" for key in _run_fields_set(kw.value)]
    return found


def _run_fields_set(update: ast.Dict) -> list[str]:
    """A run's status (a RunStatus, or what next_status gave) or its request count, set in ``update``;
    other records' ``status`` fields (a journal record's, say) are not a run's."""
    out = []
    for key, value in zip(update.keys, update.values, strict=True):
        if not isinstance(key, ast.Constant):
            continue
        text = ast.unparse(value)
        if key.value == "requests_issued" or (key.value == "status" and ("RunStatus" in text or "next_status" in text)):
            out.append(key.value)
    return out


def test_only_the_transition_module_moves_a_status() -> None:
    elsewhere = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if path not in (THE_MODULE, TABLE)
        for hit in moves_in(path.read_text(), str(path.relative_to(SRC)))
    ]
    assert elsewhere == []


def test_the_transition_module_does_move_statuses() -> None:
    found = moves_in(THE_MODULE.read_text(), "transition.py")
    assert {hit.split(" ", 1)[1] for hit in found} >= {
        "next_status",
        "builds STATE_TRANSITION",
        "builds PENDING_RECORDED",
        "builds RUN_EXITED",
        "sets status",
        "sets requests_issued",
    }


@pytest.mark.parametrize(
    "source",
    [
        "new = state.model_copy(update={'status': next_status(state.status, kind)})",
        "new = state.model_copy(update={'status': RunStatus.RUNNING})",
        "new = state.model_copy(update={'requests_issued': state.requests_issued + 1})",
        "event = NewEvent(type=EventType.STATE_TRANSITION, payload={})",
        "event = NewEvent(type=EventType.RUN_EXITED, payload={})",
    ],
)
def test_the_scan_sees_each_way_of_moving_a_status(source: str) -> None:
    assert moves_in(source, "probe.py") != []


def test_the_scan_ignores_reading_a_status() -> None:
    source = "if state.status is RunStatus.RUNNING and ev.type is EventType.STATE_TRANSITION:\n    pass"
    assert moves_in(source, "probe.py") == []
