"""The README's "Using it" snippet runs as written, and does what its comments say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def snippet() -> str:
    text = README.read_text()
    section = text[text.index("## Using it") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert match is not None
    return match.group(1)


def test_the_using_it_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(snippet(), "README.md", "exec"), namespace)
    run, done = namespace["run"], namespace["done"]
    assert run.status.value == "WAITING_FOR_USER" and run.pending.request_id == "approval_001"
    assert run.pending.guarded_action.args == {"invoice": "INV-7", "amount_cents": 1200}
    assert done.state.status.value == "COMPLETED" and done.state.usage.approvals_consumed == 1
    namespace["runtime"].close()
