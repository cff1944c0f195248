"""No module of ``src/stateward`` is over 600 lines and no function over 60 (issue 26).

A newcomer reads a module to find one concept and a function to follow one step; past these sizes a
module holds several jobs and a function several steps, and the fix is to split them by job and to name
the steps. A function is measured from its ``def`` line to its last line (signature and body, docstring
included, decorators excluded), a method or a nested function like any other. There is no list of
exceptions: an offender is named here until it is split.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import stateward

SRC = Path(stateward.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Offender:
    """A module or a function over its limit: where it is, what it is, and how long."""

    module: str
    name: str | None  # None: the module itself
    lines: int

    def __str__(self) -> str:
        if self.name is None:
            return f"{self.module}: {self.lines} lines (module limit {MAX_MODULE_LINES})"
        return f"{self.module}: {self.name} {self.lines} lines (function limit {MAX_FUNCTION_LINES})"


def offenders_in(source: str, module: str) -> list[Offender]:
    """Every size offender in one module's source: the module, then its functions in source order."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(Offender(module, None, lines))
    functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in sorted(functions, key=lambda n: n.lineno):
        length = (node.end_lineno or node.lineno) - node.lineno + 1  # from `def`: decorators excluded
        if length > MAX_FUNCTION_LINES:
            found.append(Offender(module, node.name, length))
    return found


def all_offenders() -> list[Offender]:
    """The offenders of every module of the package."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += offenders_in(path.read_text(encoding="utf-8"), str(path.relative_to(SRC.parent)))
    return found


def test_no_module_over_600_lines_and_no_function_over_60() -> None:
    offenders = all_offenders()
    assert offenders == [], "split by job / name the steps:\n" + "\n".join(map(str, offenders))


def _function(name: str, lines: int, *, decorators: int = 0, indent: str = "") -> str:
    """Source of a function of exactly ``lines`` lines from its ``def`` (plus ``decorators`` lines above)."""
    head = [f"{indent}@decorator{i}" for i in range(decorators)] + [f"{indent}def {name}() -> None:"]
    return "\n".join([*head, *[f"{indent}    x = {i}" for i in range(lines - 1)]]) + "\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (_function("f", 60), []),
        (_function("f", 61), [("f", 61)]),
        (_function("f", 60, decorators=5), []),  # decorators do not count
        ("class C:\n" + _function("method", 61, indent="    "), [("method", 61)]),
        ("def outer() -> None:\n" + _function("inner", 61, indent="    "), [("outer", 62), ("inner", 61)]),
        (_function("f", 61).replace("def f", "async def f"), [("f", 61)]),
        ("x = 1\n" * 600, []),
        ("x = 1\n" * 601, [(None, 601)]),
    ],
)
def test_the_scan_measures_modules_and_functions(source: str, expected: list[tuple[str | None, int]]) -> None:
    assert [(o.name, o.lines) for o in offenders_in(source, "m.py")] == expected
