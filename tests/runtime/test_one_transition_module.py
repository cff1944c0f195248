"""Only the Runtime changes a run's status, and in the code that is one module: runtime/transition.py
alone moves a status through the table (``next_status``), builds the events that record a move
(state_transition, pending_recorded, run_exited) and counts issued requests (``requests_issued``,
which mints request ids). Everything else calls its named operations.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
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


# -- one place for each part of recording a move (issue 26 item 1) ---------------------------------------------
Predicate = Callable[[ast.AST], bool]


def _functions_that(predicate: Predicate, tree: ast.AST) -> set[str]:
    """The top-level functions of ``tree`` in which some node satisfies ``predicate``."""
    return {
        fn.name
        for fn in ast.iter_child_nodes(tree)
        if isinstance(fn, ast.FunctionDef) and any(predicate(node) for node in ast.walk(fn))
    }


def _calls(name: str) -> Predicate:
    def found(node: ast.AST) -> bool:
        func = node.func if isinstance(node, ast.Call) else None
        return isinstance(func, ast.Name | ast.Attribute) and (getattr(func, "id", None) or func.attr) == name

    return found


def _builds(event: str) -> Predicate:
    def found(node: ast.AST) -> bool:
        return isinstance(node, ast.keyword) and node.arg == "type" and ast.unparse(node.value).endswith(event)

    return found


def test_the_exit_event_is_appended_in_one_place_and_run_resumed_built_in_one() -> None:
    tree = ast.parse(THE_MODULE.read_text())
    assert _functions_that(_calls("exit_event"), tree) == {"_moved_write"}
    assert _functions_that(_builds("RUN_RESUMED"), tree) == {"_resumed"}
    elsewhere = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if path != THE_MODULE
        for tree in [ast.parse(path.read_text())]
        if any(_calls("exit_event")(n) or _builds("RUN_RESUMED")(n) for n in ast.walk(tree))
    ]
    assert elsewhere == []


def _usage_set_by_hand(node: ast.AST) -> bool:
    """A run's usage copied with counters rewritten (``<...>.usage.model_copy(update=...)``), not advanced by a
    delta through ``Usage.plus``."""
    return _calls("model_copy")(node) and "usage" in ast.unparse(node.func)


def test_usage_counters_advance_only_through_usage_plus() -> None:
    by_hand = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "budget.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if _usage_set_by_hand(node)
    ]
    assert by_hand == []


@pytest.mark.parametrize(
    "source",
    [
        "s = state.model_copy(update={'usage': state.usage.model_copy(update={'steps': 1})})",
        "u = state.usage.model_copy(update={'model_calls': u.model_calls + 1})",
    ],
)
def test_the_usage_scan_sees_a_counter_advanced_by_hand(source: str) -> None:
    assert any(_usage_set_by_hand(node) for node in ast.walk(ast.parse(source)))
