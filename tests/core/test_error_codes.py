"""One registry of error codes: ``ErrorCode`` in core/errors.py owns every code, raise sites pass a
member (never a string), and every exception class in the tree is drawn in the errors module's docstring.
"""

from __future__ import annotations

import ast
import re
from enum import StrEnum
from pathlib import Path

import pytest

import stateward
from stateward.core import errors
from stateward.core.decision import ParseFailureCode
from stateward.core.errors import ErrorCode
from stateward.models.errors import RejectionCode
from stateward.tools.types import ToolErrorCode

SRC = Path(stateward.__file__).parent


def literal_codes(source: str, filename: str) -> list[str]:
    """Where a string literal is given as an error code: ``code="X"`` in a call, ``default_code = "X"``
    in a class, or the code argument of a refusal helper (``_refuse("X", ...)``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "code" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    found.append(f"{filename}:{kw.value.lineno} code={kw.value.value!r}")
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name == "_refuse" and node.args and isinstance(node.args[0], ast.Constant):
                found.append(f"{filename}:{node.lineno} _refuse({node.args[0].value!r})")
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = any(isinstance(t, ast.Name) and t.id == "default_code" for t in targets)
            if named and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                found.append(f"{filename}:{node.lineno} default_code={node.value.value!r}")
    return found


def test_no_raise_site_passes_a_string_code() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in literal_codes(path.read_text(), str(path))]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'raise UserError("bad", code="INVALID_AGENT")',
        'class E(RunError):\n    default_code = "E"',
        'class E(RunError):\n    default_code: ClassVar[str] = "E"',
        'raise _refuse("RUN_ENDED", "ended", run_id, request_id)',
    ],
)
def test_the_scan_finds_each_kind_of_string_code(source: str) -> None:
    assert len(literal_codes(source, "example.py")) == 1


def test_the_scan_accepts_members() -> None:
    assert literal_codes('raise UserError("bad", code=ErrorCode.INVALID_AGENT)', "example.py") == []


def test_every_code_is_upper_case_equal_to_its_name_and_unique() -> None:
    assert [c.name for c in ErrorCode if not re.fullmatch(r"[A-Z][A-Z0-9_]*", c.value)] == []
    assert [c.name for c in ErrorCode if c.value != c.name] == []
    # An enum silently turns a repeated value into an alias: every name must be its own member.
    assert len(ErrorCode.__members__) == len(list(ErrorCode))


def test_a_layers_narrower_code_enum_is_drawn_from_the_registry() -> None:
    for subset in (ToolErrorCode, ParseFailureCode, RejectionCode):
        assert {c.value for c in subset} <= {c.value for c in ErrorCode}, subset.__name__


def test_parse_reads_known_codes_and_refuses_the_rest_quietly() -> None:
    assert ErrorCode.parse("STALE_LEASE") is ErrorCode.STALE_LEASE
    assert ErrorCode.parse("stale_lease") is None
    assert ErrorCode.parse(None) is None


def error_classes() -> dict[str, ast.ClassDef]:
    """Every class in src/ that descends from StatewardError (by its bases' names, read from source)."""
    classes: dict[str, ast.ClassDef] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
    found = {"StatewardError": classes["StatewardError"]}
    grew = True
    while grew:
        grew = False
        for name, node in classes.items():
            bases = {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases}
            if name not in found and bases & set(found):
                found[name] = node
                grew = True
    return found


def default_code_of(node: ast.ClassDef) -> str | None:
    for item in node.body:
        if isinstance(item, ast.Assign | ast.AnnAssign):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            if any(isinstance(t, ast.Name) and t.id == "default_code" for t in targets) and item.value is not None:
                return ast.unparse(item.value)
    return None


def test_every_error_class_is_drawn_in_the_tree_with_a_registered_default_code() -> None:
    tree = errors.__doc__ or ""
    classes = error_classes()
    assert {"ToolTimeout", "ModelCallError", "PlanPatchError", "AuthError"} <= set(classes)  # every layer's
    assert sorted(name for name in classes if not re.search(rf"\b{name}\b", tree)) == []
    codes = {name: default_code_of(node) for name, node in classes.items()}
    assert sorted(name for name, code in codes.items() if code is not None and not code.startswith("ErrorCode.")) == []
    assert (
        sorted(
            name
            for name, code in codes.items()
            if code is not None and code.removeprefix("ErrorCode.") not in ErrorCode.__members__
        )
        == []
    )


def test_error_codes_print_and_serialise_as_their_value() -> None:
    error = errors.RunError("nope", code=ErrorCode.LEASE_HELD)
    assert str(error) == "LEASE_HELD: nope"
    assert error.to_dict() == {"code": "LEASE_HELD", "message": "nope"}
    assert type(error.to_dict()["code"]) is str
    assert isinstance(ErrorCode.LEASE_HELD, StrEnum)
