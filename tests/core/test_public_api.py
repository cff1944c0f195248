"""The public API is one deliberate list per public module, pinned: a name added or removed fails here.

To change the surface on purpose, update ``public_api.json`` beside this file in the same commit.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import pytest

import stateward

PUBLIC_MODULES = (
    "stateward",
    "stateward.api",
    "stateward.cli.plugins",
    "stateward.planning",
    "stateward.models",
    "stateward.observability",
    "stateward.testing",
    "stateward.tools",
    "stateward.tools.mcp",
    "stateward.verify",
)
SNAPSHOT = Path(__file__).with_name("public_api.json")


def surface() -> dict[str, list[str]]:
    return {name: sorted(importlib.import_module(name).__all__) for name in PUBLIC_MODULES}


def test_all_is_sorted_and_matches_the_lazy_exports() -> None:
    assert list(stateward.__all__) == sorted(stateward.__all__)
    assert set(stateward.__all__) == set(stateward._EXPORTS)


def test_the_public_surface_is_the_snapshot() -> None:
    assert surface() == json.loads(SNAPSHOT.read_text())


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_resolves_and_says_why_it_exists(module_name: str) -> None:
    module = importlib.import_module(module_name)
    undocumented = []
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
        # A dataclass without a docstring gets its signature as one: that says nothing.
        if not doc or not doc.strip() or doc.startswith(f"{value.__name__}("):
            undocumented.append(name)
    assert undocumented == []


def public_members(cls: type) -> list[str]:
    """The methods and properties a class of ours defines itself (not pydantic's, not Enum's)."""
    fields = set(getattr(cls, "__dataclass_fields__", ())) | set(getattr(cls, "model_fields", ()))
    names = []
    for name, value in vars(cls).items():
        if name.startswith("_") or name in fields:  # a field whose default is a function is data
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            names.append(name)
    return names


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_method_of_a_public_class_says_why(module_name: str) -> None:
    module = importlib.import_module(module_name)
    undocumented = []
    for name in module.__all__:
        value = getattr(module, name)
        if not inspect.isclass(value) or not value.__module__.startswith("stateward"):
            continue
        for member in public_members(value):
            # getdoc walks the MRO: an implementation of a documented protocol method inherits its why.
            doc = inspect.getdoc(getattr(value, member))
            if not doc or not doc.strip():
                undocumented.append(f"{name}.{member}")
    assert undocumented == []
