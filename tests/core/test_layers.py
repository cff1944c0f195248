"""The layers of ``src/stateward`` hold: every import points down, never up.

The order, bottom first (one tier per line; packages on one tier are peers and import neither each other)::

    core                      pure types and rules; imports nothing of ours
    store                     Store protocol, SQLite, PostgreSQL (knows no gateway module)
    models                    model protocol and providers
    tools                     the Tool Gateway
    planning                  goals, plans, patches, plan budgets
    verify                    contracts, checks, repair policy
    observability             spans, metrics and figures of runs (the runtime reports to it)
    controllers · runtime     meet in core.contract, never in each other
    chaos · testing · temporal  harnesses over the runtime; the Temporal backend (a run as a workflow)
    api · pytest_plugin       the HTTP service; the pytest plugin over stateward.testing
    cli                       the operator's command line
    stateward (the package)   the public facade re-exports from every layer

Every import counts: module level, inside functions (lazy), under ``TYPE_CHECKING``, and a module
named in a string (lazy re-export tables, ``importlib.import_module``). The exceptions are listed in
``ALLOWED_UPWARD`` with their reason. Besides the order: the CLI and the HTTP service never reach a
store implementation (they go through ``stateward.store.base`` and ``stateward.store.backends``), nothing in
the library imports the demos, and no two files import each other, directly or around a circle (a known circle
would be listed in ``KNOWN_CIRCLES`` with its reason; none is).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import stateward

SRC = Path(stateward.__file__).parent

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(tier.split())
    for tier in (
        "core",
        "store",
        "models",
        "tools",
        "planning",
        "verify",
        "observability",
        "controllers runtime",
        "chaos testing temporal",
        "api pytest_plugin",
        "cli",
        "stateward",
    )
)

# (importing module, imported module) -> why it is allowed to point up.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("stateward.planning", "stateward.controllers.plan_run"): (
        "stateward.planning re-exports the plan-run engine (a controller over planning) lazily, so users of the "
        "planning API find PlanRunController beside the plan types; nothing in planning uses it"
    ),
    ("stateward.planning", "stateward.controllers.plan_support"): "the same lazy re-export (plan_run_tools, ...)",
}

# Import circles between files that are known and must not grow (each file of one imports, through the others,
# itself), each listed with the issue that removes it; the test fails once one is gone, so the list shrinks with it.
# None is left.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}

# Modules the CLI and the HTTP service must not import: they translate store errors by code, not by driver.
STORE_IMPLEMENTATIONS = ("stateward.store.sqlite", "stateward.store.postgres", "stateward.store._pg_sql")
STORE_DRIVERS = ("sqlite3", "psycopg", "psycopg_pool")

_MODULE_NAME = re.compile(r"stateward(\.[a-z_][a-z0-9_]*)+")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports (a module, or a module's attribute)
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (SRC.parent / rel).with_suffix(".py").exists() or (SRC.parent / rel / "__init__.py").exists()


def imports_of(path: Path) -> list[Import]:
    return imports_in(path.read_text(), module_name(path), is_package=path.name == "__init__.py")


def imports_in(source: str, name: str, *, is_package: bool = False) -> list[Import]:
    """Every import in module ``name``'s ``source``, wherever it stands, plus module names written as strings
    (a logger's name is not an import, even where it is a module's)."""
    package = name if is_package else name.rpartition(".")[0]
    found: list[Import] = []
    tree = ast.parse(source, name)
    loggers = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _called(node) == "getLogger"
        for arg in node.args
    }
    for node in ast.walk(tree):
        if id(node) in loggers:
            continue
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found += [Import(name, f"{base}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.fullmatch(node.value):
            found += [Import(name, node.value, node.lineno)] if is_module(node.value) else []
    return found


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def import_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Per stateward module, the stateward modules it imports (a name imported from a module counts as the module)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.target.startswith("stateward."):
            target = imp.target if is_module(imp.target) else imp.target.rpartition(".")[0]
            if target != imp.module:
                graph.setdefault(imp.module, set()).add(target)
    return graph


def circles(imports: list[Import]) -> list[frozenset[str]]:
    """The import circles between files: every set of two or more modules each of which reaches all the others
    (the strongly connected components of the import graph, by Tarjan's algorithm; every kind of import counts)."""
    graph = import_graph(imports)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            members = {stack.pop()}
            while node not in members:
                members.add(stack.pop())
            if len(members) > 1:
                found.append(frozenset(members))

    for root in sorted(graph):
        if root not in index:
            visit(root)
    return found


def layer_of(module: str) -> int:
    """The tier of a stateward module: its first component below ``stateward`` (the package itself on top)."""
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "stateward"
    for index, tier in enumerate(LAYERS):
        if key in tier:
            return index
    raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS")


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "stateward"


def all_imports() -> list[Import]:
    return [imp for path in sorted(SRC.rglob("*.py")) for imp in imports_of(path)]


def upward(imports: list[Import]) -> list[str]:
    """Imports that point up, or sideways to a peer on the same tier, and are not listed as allowed."""
    bad = []
    for imp in imports:
        if not imp.target.startswith("stateward.") or package_of(imp.target) == package_of(imp.module):
            continue
        target = imp.target if is_module(imp.target) else imp.target.rpartition(".")[0]
        if (imp.module, target) in ALLOWED_UPWARD:
            continue
        if layer_of(imp.target) >= layer_of(imp.module):
            bad.append(f"{imp.module}:{imp.line} imports {imp.target}")
    return bad


def test_every_package_has_a_layer() -> None:
    packages = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.suffix == ".py" or p.is_dir()}
    packages = {p for p in packages if not p.startswith("__")} | {"stateward"}
    assert packages - set().union(*LAYERS) == set()


def test_no_import_points_up() -> None:
    assert upward(all_imports()) == []


def test_every_allowed_exception_is_still_needed() -> None:
    used = {(imp.module, imp.target) for imp in all_imports()}
    used |= {(imp.module, imp.target.rpartition(".")[0]) for imp in all_imports()}
    assert set(ALLOWED_UPWARD) - used == set()


def test_no_two_files_import_each_other_around_a_circle() -> None:
    found = circles(all_imports())
    assert sorted(sorted(c) for c in found if c not in KNOWN_CIRCLES) == []
    # A known circle that is gone leaves the list with it.
    assert set(KNOWN_CIRCLES) <= set(found)


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"stateward.a": "from stateward.b import x", "stateward.b": "def f():\n    import stateward.a"}, 1),
        ({"stateward.a": "if TYPE_CHECKING:\n    from stateward.b import X", "stateward.b": "from . import a"}, 1),
        ({"stateward.a": "from stateward.b import x", "stateward.b": 'log = getLogger("stateward.a")'}, 0),
        ({"stateward.a": "from stateward.b import x", "stateward.b": "from stateward.c import y"}, 0),
    ],
)
def test_the_circle_scan_sees_a_circle_through_any_kind_of_import(
    sources: dict[str, str], expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "is_module", lambda dotted: dotted in {"stateward.a", "stateward.b"})
    imports = [imp for name, source in sources.items() for imp in imports_in(source, name)]
    assert len(circles(imports)) == expected


def test_controllers_and_the_runtime_meet_only_in_core() -> None:
    imports = all_imports()
    crossing = [
        f"{i.module} imports {i.target}"
        for i in imports
        if {package_of(i.module), package_of(i.target)} == {"controllers", "runtime"}
    ]
    assert crossing == []


@pytest.mark.parametrize("front", ["stateward.cli", "stateward.api"])
def test_the_cli_and_the_service_reach_no_store_implementation(front: str) -> None:
    reached = [
        f"{i.module}:{i.line} imports {i.target}"
        for i in all_imports()
        if (i.module == front or i.module.startswith(front + "."))
        and i.target.startswith(STORE_IMPLEMENTATIONS + STORE_DRIVERS)
    ]
    assert reached == []


def test_the_library_does_not_import_the_demos() -> None:
    assert [f"{i.module} imports {i.target}" for i in all_imports() if i.target.startswith("stateward_demos")] == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("stateward.store.base", "from stateward.tools.ports import GatewayStore", 1),
        ("stateward.core.state", "def f():\n    from stateward.runtime.runtime import Runtime", 1),
        ("stateward.core.state", "if TYPE_CHECKING:\n    from stateward.models.base import Model", 1),
        ("stateward.runtime.driver", "from stateward.controllers.react import ReActController", 1),
        ("stateward.controllers.react", "import stateward.runtime.agent", 1),
        ("stateward.models.base", '_LAZY = {"X": "stateward.tools.gateway"}', 1),
        ("stateward.store.base", "from ..tools.ports import GatewayStore", 1),
        ("stateward.tools.gateway", "from ..store.base import Store", 0),
        ("stateward.runtime.driver", "from stateward.core.contract import Proposal", 0),
        ("stateward.runtime.driver", "from .transition import handle", 0),
        ("stateward.cli.app", "from stateward.runtime.runtime import Runtime", 0),
        ("stateward.models.base", 'log = getLogger("stateward.expiry")', 0),
    ],
)
def test_the_scan_sees_each_kind_of_import(module: str, source: str, expected: int) -> None:
    assert len(upward(imports_in(source, module))) == expected
