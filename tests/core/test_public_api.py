"""The public API is one deliberate list per public module, pinned: a name added or removed fails here.

To change the surface on purpose, update ``public_api.json`` beside this file in the same commit.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

import stateward

PUBLIC_MODULES = (
    "stateward",
    "stateward.api",
    "stateward.cli.plugins",
    "stateward.planning",
    "stateward.models",
    "stateward.observability",
    "stateward.temporal",
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


# -- the public-surface budget (stateward/__init__.py's docstring) ------------------------------------------
BUDGET = re.compile(r"The top level holds at most (\d+) names")
JOB = re.compile(r"^- (?P<job>[^\n]+?) \((?P<count>\d+)\): (?P<names>.*?)(?=^- |\Z)", re.M | re.S)
# Subpackages whose names stay in them: none is re-exported at the top level.
OWN_NAMES = ("planning", "verify", "observability", "api", "cli", "chaos", "testing", "pytest_plugin")
# One name, two objects: known, kept until a rename with a deprecation path (issue 26 item 4). Do not add to it.
KNOWN_COLLISIONS = {
    "RetryPolicy": {"stateward.tools.retry", "stateward.planning.plan"},  # a tool's retries; a work item's
    "Usage": {"stateward.core.budget", "stateward.core.model_io"},  # a run's usage; one model call's
}


def budget_jobs() -> tuple[int, dict[str, tuple[int, list[str]]]]:
    """The budget stated in the top-level docstring: the total, and per job its count and names."""
    doc = stateward.__doc__ or ""
    found = BUDGET.search(doc)
    assert found is not None, "the top-level docstring states no budget"
    section = doc[found.end() :]
    jobs = {
        m["job"]: (int(m["count"]), re.findall(r"``(\w+)``", m["names"]))
        for m in JOB.finditer(section[section.index("\n- ") + 1 :])
    }
    return int(found.group(1)), jobs


def test_the_top_level_is_exactly_the_budgeted_names_within_the_budget() -> None:
    total, jobs = budget_jobs()
    listed = [name for _, names in jobs.values() for name in names]
    assert len(jobs) == 5
    assert {job: len(names) for job, (_, names) in jobs.items()} == {job: n for job, (n, _) in jobs.items()}
    assert len(listed) == len(set(listed)), "a name serves one job"
    assert sorted(listed) == sorted(stateward.__all__)
    assert len(stateward.__all__) <= total


def test_no_subpackage_concept_is_re_exported_at_the_top_level() -> None:
    homes = {name: module.split(".")[1] for name, module in stateward._EXPORTS.items()}
    assert {name: home for name, home in homes.items() if home in OWN_NAMES} == {}


def test_a_public_name_means_one_object_in_every_public_module() -> None:
    homes: dict[str, set[str]] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            homes.setdefault(name, set()).add(getattr(value, "__module__", None) or module_name)
    assert {name: found for name, found in homes.items() if len(found) > 1} == KNOWN_COLLISIONS


@pytest.mark.parametrize(
    ("change", "test"),
    [
        (lambda all_: (*all_, "Extra"), test_the_top_level_is_exactly_the_budgeted_names_within_the_budget),
        (lambda all_: all_[1:], test_the_top_level_is_exactly_the_budgeted_names_within_the_budget),
    ],
)
def test_the_budget_check_fails_on_a_name_it_does_not_list(
    monkeypatch: pytest.MonkeyPatch, change: Any, test: Any
) -> None:
    monkeypatch.setattr(stateward, "__all__", change(stateward.__all__))
    with pytest.raises(AssertionError):
        test()
