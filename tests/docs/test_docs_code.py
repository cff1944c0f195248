"""Every code block in docs/ runs, in order, and the site builds with ``mkdocs build --strict``.

Conventions (also stated in docs/index.md, "About the code on these pages"):

- ``python`` blocks of one page run in order in one namespace, in a fresh temporary directory;
- a block titled with a file name (```` ```python title="expense_agents.py" ````) is written to that
  file in the page's directory instead (later blocks and commands import it);
- ``bash`` blocks run through ``bash -euo pipefail`` in the same directory, with this interpreter's
  ``bin/`` first on PATH;
- ``json`` blocks must parse;
- a block whose title says ``not run`` (e.g. it needs a PostgreSQL server) is skipped; they are rare;
- ``<!-- docs-test: continues PAGE -->`` runs PAGE's blocks first, in the same namespace and directory.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

import stateward

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
DEMOS = ROOT / "demos" / "src"
# The public modules are the ones the public API snapshot pins (tests/core/public_api.json).
PUBLIC_MODULES = set(json.loads((ROOT / "tests" / "core" / "public_api.json").read_text()))
FENCE = re.compile(r"^```([\w+-]*)([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
CONTINUES = re.compile(r"<!--\s*docs-test:\s*continues\s+(\S+)\s*-->")
TITLE = re.compile(r'title="([^"]*)"')
FILE_NAME = re.compile(r"^[\w./-]+\.\w+$")
MAX_NOT_RUN = 4  # blocks that cannot run here (installing, a PostgreSQL server): keep them rare
BLOCK_TIMEOUT_S = 120


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    title: str
    code: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def pages() -> list[str]:
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text()
    found = []
    for m in FENCE.finditer(text):
        title = TITLE.search(m.group(2))
        line = text.count("\n", 0, m.start()) + 1
        found.append(Block(page, line, m.group(1), title.group(1) if title else "", m.group(3)))
    return found


def chain(page: str) -> list[str]:
    """The pages whose blocks run before ``page``'s (``docs-test: continues``), then the page itself."""
    order: list[str] = []
    current: str | None = page
    while current is not None:
        if current in order:
            raise AssertionError(f"docs-test: continues loops through {current}")
        order.insert(0, current)
        m = CONTINUES.search((DOCS / current).read_text())
        current = m.group(1) if m else None
    return order


def runs_commands(page: str) -> bool:
    return any(b.lang == "bash" and "not run" not in b.title for p in chain(page) for b in blocks(p))


def page_params() -> list[object]:
    return [pytest.param(p, id=p, marks=[pytest.mark.slow] if runs_commands(p) else []) for p in pages()]


def run_python(block: Block, module: types.ModuleType) -> None:
    # Padded so a traceback names the line of the Markdown file.
    code = compile("\n" * block.line + block.code, f"docs/{block.page}", "exec")
    exec(code, module.__dict__)


def run_bash(block: Block, cwd: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("STATEWARD_AGENTS", None)
    env.pop("STATEWARD_DB", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{block.where} exited {done.returncode}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("page", page_params())
def test_every_code_block_of_the_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("STATEWARD_AGENTS", raising=False)
    name = "docs_" + re.sub(r"\W", "_", page)
    module = types.ModuleType(name)
    before = set(sys.modules)
    monkeypatch.setitem(sys.modules, name, module)
    ran = 0
    try:
        for current in chain(page):
            for block in blocks(current):
                if "not run" in block.title:
                    continue
                if block.title and FILE_NAME.match(block.title):
                    (tmp_path / block.title).parent.mkdir(parents=True, exist_ok=True)
                    (tmp_path / block.title).write_text(block.code)
                elif block.lang == "python":
                    run_python(block, module)
                elif block.lang == "bash":
                    run_bash(block, tmp_path)
                elif block.lang == "json":
                    json.loads(block.code)
                else:
                    continue
                ran += 1
    finally:
        for added in set(sys.modules) - before:  # modules the page wrote and imported stay its own
            if getattr(sys.modules[added], "__file__", None) and str(tmp_path) in str(sys.modules[added].__file__):
                del sys.modules[added]
    assert ran > 0 or not blocks(page), f"docs/{page}: none of its code blocks ran"


def test_the_docs_have_pages_and_code_and_few_blocks_that_do_not_run() -> None:
    every = [b for p in pages() for b in blocks(p)]
    assert len(pages()) >= 9 and sum(b.lang == "python" for b in every) >= 20
    not_run = [b for b in every if "not run" in b.title]
    assert len(not_run) <= MAX_NOT_RUN, [b.where for b in not_run]
    assert all(re.search(r"not run: \w+", b.title) for b in not_run), "say why a block does not run"
    unknown = [b.where for b in every if b.lang not in {"python", "bash", "json", "text", "toml", "yaml"}]
    assert unknown == [], "a code block needs a language the docs test knows"


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "stateward":  # ``from stateward import core`` imports a module too
                found.update(f"stateward.{a.name}" for a in node.names if a.name not in stateward.__all__)
    return found


def private_imports(source: str) -> set[str]:
    ours = {m for m in imported_modules(source) if m == "stateward" or m.startswith("stateward.")}
    return {m for m in ours if m not in PUBLIC_MODULES}


def example_sources() -> dict[str, str]:
    docs = {b.where: b.code for p in pages() for b in blocks(p) if b.lang == "python"}
    files = {
        f.relative_to(ROOT).as_posix(): f.read_text() for folder in (EXAMPLES, DEMOS) for f in folder.rglob("*.py")
    }
    return {**docs, **files}


def test_docs_and_examples_import_only_public_modules() -> None:
    sources = example_sources()
    assert all(any(k.startswith(f"{where}/") for k in sources) for where in ("examples", "docs", "demos"))
    offenders = {where: sorted(private_imports(src)) for where, src in sources.items() if private_imports(src)}
    assert offenders == {}


def test_the_private_import_check_sees_a_private_import() -> None:
    assert private_imports("from stateward.controllers.plan_run import PlanRunConfig") == {
        "stateward.controllers.plan_run"
    }
    assert private_imports("import stateward.core.state") == {"stateward.core.state"}
    assert private_imports("from stateward import core") == {"stateward.core"}
    assert private_imports("from stateward import Agent, guard\nfrom stateward.planning import Plan") == set()


@pytest.mark.slow
def test_mkdocs_builds_the_site_strictly(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{shlex.join(cmd)}\n{done.stdout}\n{done.stderr}"
    for page in pages():
        built = tmp_path / (page[:-3] + ("/index.html" if not page.endswith("index.md") else ".html"))
        assert built.exists(), f"{page} was not built ({built})"
