"""Sealed documents (core/sealed.py): JSON made once, read like the plain object, never changed."""

from __future__ import annotations

import copy
import json
import pickle
from types import MappingProxyType
from typing import Any

import pytest
from pydantic import BaseModel, RootModel

from stateward.core.canonical import sha256_hex
from stateward.core.errors import UserError
from stateward.core.sealed import Sealed
from stateward.core.state import AgentRef, RunState

PLAIN: dict[str, Any] = {"plan_id": "p1", "version": 2, "work_items": [{"id": "W01", "deps": []}], "note": "é\n"}


class Record(BaseModel):
    attempts: list[str] = []
    output: str | None = None


def state(memo: dict[str, Any]) -> RunState:
    return RunState(run_id="run_s", agent=AgentRef(name="tests:agent"), goal="g", memo=memo)


def test_a_sealed_mapping_holds_its_json_and_reads_like_the_object() -> None:
    sealed = Sealed(PLAIN)
    assert json.loads(sealed.text) == PLAIN
    assert sealed == PLAIN and PLAIN.__eq__(sealed) is NotImplemented and dict(sealed) == PLAIN
    assert [PLAIN].count(sealed) == 1  # a dict on the left falls back to the sealed side
    assert sealed["work_items"][0]["id"] == "W01" and "note" in sealed and len(sealed) == 4
    assert sealed.get("missing", 7) == 7 and list(sealed.keys()) == list(PLAIN)
    assert sealed.digest == sha256_hex(sealed.text)
    assert sealed != {**PLAIN, "version": 3}


def test_a_sealed_model_is_its_model_dump_json() -> None:
    record = Record(attempts=["RUNNING"], output=None)
    sealed = Sealed(record)
    assert sealed.text == record.model_dump_json() and sealed == record.model_dump(mode="json")
    assert Sealed(sealed) is sealed  # already sealed: the same document


def test_what_a_read_returns_is_the_callers_and_changes_nothing() -> None:
    sealed = Sealed(PLAIN)
    text = sealed.text
    value = sealed.value
    value["version"] = 99
    value["work_items"].append({"id": "W02"})
    sealed["work_items"].append({"id": "W03"})
    assert sealed.text == text and sealed == PLAIN and sealed["version"] == 2


def test_a_sealed_document_cannot_be_changed() -> None:
    sealed = Sealed(PLAIN)
    with pytest.raises(AttributeError):
        sealed._text = "{}"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del sealed._text
    with pytest.raises(TypeError):
        sealed["version"] = 3  # type: ignore[index]
    assert sealed == PLAIN


class Listed(RootModel[list[int]]):
    pass


def test_only_a_json_object_is_sealed() -> None:
    for value in ([1, 2], Listed([1, 2])):
        with pytest.raises(UserError) as err:
            Sealed(value)  # type: ignore[arg-type]
        assert err.value.code == "NOT_AN_OBJECT"
    assert Sealed(MappingProxyType({"a": 1})) == {"a": 1}


def test_a_state_holding_sealed_documents_dumps_the_plain_memo() -> None:
    plain = state({"plan": PLAIN, "items": {"W01": {"attempts": ["RUNNING"], "output": None}}, "turn": 3})
    sealed = state({"plan": Sealed(PLAIN), "items": {"W01": Sealed(Record(attempts=["RUNNING"]))}, "turn": 3})
    assert sealed.model_dump() == plain.model_dump()
    assert sealed.model_dump(mode="json") == plain.model_dump(mode="json")
    assert json.loads(sealed.model_dump_json()) == json.loads(plain.model_dump_json())
    assert RunState.model_validate_json(sealed.model_dump_json()) == plain == sealed


def test_copies_and_pickles_keep_the_document() -> None:
    sealed = Sealed(PLAIN)
    assert copy.copy(sealed) is sealed and copy.deepcopy(sealed) is sealed
    assert copy.deepcopy(state({"plan": sealed})).memo["plan"] is sealed
    back = pickle.loads(pickle.dumps(sealed))
    assert back.text == sealed.text and back == PLAIN
