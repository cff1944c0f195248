"""The registry: one tool per name, and a model is shown exactly the tools visible to it."""

from __future__ import annotations

import pytest

from stateward import UserError
from stateward.tools import ToolRegistry, tool


@tool()
def lookup(key: str) -> dict[str, str]:
    """Look a record up by key.

    Reads only; never changes the record.
    """
    return {"key": key}


@tool(description="Delete a record.")
def delete(key: str) -> dict[str, str]:
    return {"deleted": key}


def test_a_model_is_shown_only_the_visible_tools() -> None:
    registry = ToolRegistry([lookup, delete])
    assert [s["name"] for s in registry.schemas(frozenset({"lookup"}))] == ["lookup"]
    assert [s["name"] for s in registry.schemas()] == ["delete", "lookup"]
    assert registry.schemas(frozenset()) == []


def test_one_name_registers_once() -> None:
    registry = ToolRegistry([lookup])
    with pytest.raises(UserError) as err:
        registry.register(lookup)
    assert err.value.code == "DUPLICATE_TOOL"


def test_the_description_is_the_docstrings_first_paragraph_unless_given() -> None:
    assert lookup.description == "Look a record up by key."
    assert delete.description == "Delete a record."
