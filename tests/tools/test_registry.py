"""The registry: one tool per name, and a model is shown exactly the tools visible to it."""

from __future__ import annotations

import copy

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


def test_a_tools_input_schema_is_made_once_and_every_caller_gets_its_own_copy() -> None:
    """Every agent built over a tool (a worker builds one per run) shares one generated schema."""

    @tool
    def quote(sku: str, qty: int = 1) -> dict[str, int]:
        """Price a SKU."""
        return {"cents": 100 * qty}

    pristine = copy.deepcopy(quote.input_schema())
    assert pristine["required"] == ["sku"] and set(pristine["properties"]) == {"sku", "qty"}
    mine = quote.input_schema()
    mine["properties"]["sku"]["type"] = "integer"  # a caller changing its copy changes nobody else's
    mine["required"].append("qty")
    assert quote.input_schema() == pristine
