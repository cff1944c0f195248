"""The project file: ``stateward.toml`` (or ``[tool.stateward]`` in ``pyproject.toml``), found from the
working directory upward, names what a shell would otherwise export::

    # stateward.toml
    db = "runs.db"                    # STATEWARD_DB: a SQLite path (relative to this file) or postgresql:// URL
    agents = ["ops_agents:registry"]  # STATEWARD_AGENTS: the agent registries this process may build
    python_path = ["src"]             # prepended to the import path (relative to this file), as PYTHONPATH

The nearest directory with either file wins (``stateward.toml`` before ``pyproject.toml``; a
``pyproject.toml`` without ``[tool.stateward]`` is passed over). An environment variable that is set
wins over the file, and ``--db`` / ``--agents`` over both (``--agents`` adds to the registries). A file
that is not TOML, has an unknown key or a value of the wrong type is INVALID_PROJECT_FILE (exit 3).
The file is the operator's, like their shell's environment: it names code to import, so it is read
only from the directory a command runs in and its parents.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stateward.core.errors import ErrorCode, UserError

FILE_NAME = "stateward.toml"
PYPROJECT = "pyproject.toml"
MAX_BYTES = 1024 * 1024


class ProjectFile(BaseModel):
    """What a project file may name (every key optional, no other key)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    db: str | None = Field(default=None, min_length=1, max_length=4096)
    agents: list[str] = Field(default_factory=list, max_length=100)
    python_path: list[str] = Field(default_factory=list, max_length=100)


def find(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest project file from ``start`` upward and its stateward table, or None."""
    for directory in (start, *start.parents):
        for name in (FILE_NAME, PYPROJECT):
            path = directory / name
            if not path.is_file():
                continue
            table = _table(path)
            if table is not None:
                return path, table
    return None


def _table(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()[: MAX_BYTES + 1]
        if len(raw) > MAX_BYTES:
            raise _invalid(path, f"larger than {MAX_BYTES} bytes")
        document = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _invalid(path, f"not TOML: {exc}") from None
    except OSError as exc:
        raise _invalid(path, f"unreadable: {exc.strerror}") from None
    if path.name == FILE_NAME:
        return document
    tool = document.get("tool")
    table = tool.get("stateward") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise _invalid(path, "[tool.stateward] must be a table")
    return table


def _invalid(path: Path, why: str) -> UserError:
    return UserError(f"project file {path}: {why}"[:1000], code=ErrorCode.INVALID_PROJECT_FILE)


def load(start: Path) -> tuple[Path, ProjectFile] | None:
    """The nearest project file, validated (INVALID_PROJECT_FILE naming the key at fault)."""
    found = find(start)
    if found is None:
        return None
    path, table = found
    try:
        return path, ProjectFile.model_validate(table)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "file"
        raise _invalid(path, f"{where}: {first['msg']}") from None


def apply(env: MutableMapping[str, str], start: Path, import_path: list[str]) -> Path | None:
    """Fill what the environment leaves unset from the nearest project file; returns the file used."""
    loaded = load(start)
    if loaded is None:
        return None
    path, project = loaded
    base = path.parent
    if project.db and not env.get("STATEWARD_DB"):
        env["STATEWARD_DB"] = project.db if "://" in project.db else str(base / project.db)
    if project.agents and not env.get("STATEWARD_AGENTS"):
        env["STATEWARD_AGENTS"] = ",".join(project.agents)
    for entry in reversed(project.python_path):
        folder = str(base / entry)
        if folder not in import_path:
            import_path.insert(0, folder)
    return path


def apply_to_process() -> None:
    """:func:`apply` on this process's environment and ``sys.path``, from the working directory."""
    apply(os.environ, Path.cwd(), sys.path)
