"""Rule-based module risk for the payment migration: a decision list, first matching rule wins.

Risk is decided by rules over observed facts, never by a model's impression, so the same inputs always
give the same level and the answer names the rule that fired (the risk matrix must be explainable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from stateward.planning import FindingRisk


@dataclass(frozen=True)
class RiskInputs:
    """What the research observed about one module (``repo/name``)."""

    module: str
    call_sites: int
    change_ids: tuple[str, ...]  # breaking changes the module's call sites hit
    removed_api: bool  # one of them removes an API outright (no drop-in replacement)
    covering_tests: int  # test files that import the module
    money_movement: bool  # per the service catalogue


@dataclass(frozen=True)
class RiskScore:
    risk: FindingRisk
    rule: str
    reason: str


HEAVY_USE: Final = 5
BROAD_USE: Final = 3


def score(inputs: RiskInputs) -> RiskScore:
    """Apply the rules in order; the first that matches decides."""
    n, untested = inputs.call_sites, inputs.covering_tests == 0
    if n == 0:
        return RiskScore(FindingRisk.NONE_FOUND, "N0-no-usage", "no v1 call site in this module")
    if inputs.money_movement and n >= HEAVY_USE:
        return RiskScore(FindingRisk.HIGH, "H1-money-path-heavy-use", f"moves money and has {n} v1 call sites")
    if inputs.removed_api and untested:
        return RiskScore(FindingRisk.HIGH, "H2-removed-api-untested", "calls a removed API and no test covers it")
    if n >= BROAD_USE:
        return RiskScore(FindingRisk.MEDIUM, "M1-broad-use", f"{n} v1 call sites")
    if inputs.money_movement and untested:
        return RiskScore(FindingRisk.MEDIUM, "M2-money-path-untested", "moves money and no test covers it")
    return RiskScore(FindingRisk.LOW, "L1-limited-use", f"{n} v1 call site(s), not on an untested money path")
