"""#31 item 1: a ``replay:`` path reads only what the operator allowed: inside STATEWARD_REPLAY_DIR when
set, a regular file, bounded in size; refused by name before a byte is read otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stateward.core.errors import UserError
from stateward.models.config import model_from_spec


def _recording(path: Path) -> Path:
    path.write_text(json.dumps({"key": "k", "model": "m", "reply": {}}) + "\n")
    return path


def _refusal(spec: str, env: dict[str, str]) -> str:
    with pytest.raises(UserError) as refused:
        model_from_spec(spec, env=env)
    return refused.value.code


def test_a_recording_inside_the_directory_plays(tmp_path: Path) -> None:
    allowed = tmp_path / "recordings"
    allowed.mkdir()
    good = _recording(allowed / "run.jsonl")
    model = model_from_spec(f"replay:{good}", env={"STATEWARD_REPLAY_DIR": str(allowed)})
    assert model.name == "replay:m"


def test_paths_outside_the_directory_are_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "recordings"
    allowed.mkdir()
    outside = _recording(tmp_path / "secret.jsonl")
    (allowed / "link.jsonl").symlink_to(outside)
    env = {"STATEWARD_REPLAY_DIR": str(allowed)}
    for spec in (f"replay:{outside}", f"replay:{allowed}/../secret.jsonl", f"replay:{allowed / 'link.jsonl'}"):
        assert _refusal(spec, env) == "RECORDING_NOT_ALLOWED", spec


def test_no_regular_file_and_no_large_file_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_bytes(b" " * 2048)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    env = {"STATEWARD_REPLAY_MAX_BYTES": "1024"}
    assert _refusal(f"replay:{big}", env) == "RECORDING_NOT_ALLOWED"
    assert _refusal(f"replay:{fifo}", env) == "RECORDING_NOT_ALLOWED"  # opened without blocking, refused
    assert _refusal("replay:/dev/zero", {}) == "RECORDING_NOT_ALLOWED"
    assert _refusal(f"replay:{tmp_path}", {}) == "RECORDING_NOT_ALLOWED"
    assert _refusal(f"replay:{tmp_path / 'missing.jsonl'}", {}) == "RECORDING_NOT_FOUND"
