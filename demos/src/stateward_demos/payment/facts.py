"""Facts derived from the fixtures: code search, call sites, indirect usages, test coverage, evidence ids.

Both the tools and the report builders use these functions, so a report cannot cite a location the
tools would not show: every evidence id is computed from a fixture position, and
:func:`resolve_evidence` is the single answer to "does this id point at something real?".

Evidence id scheme::

    ev:inventory:payment-services         the repository inventory
    ev:access:<repo>                      the access check of one repository
    ev:doc:<doc_id>#<section_id>          one document section (e.g. ev:doc:paysdk-v2-migration-guide#bc2)
    ev:code:<repo>/<path>:<line>          one source line (e.g. ev:code:ledger/src/ledger/posting.py:10)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from stateward_demos.payment import fixtures as fx
from stateward_demos.payment.risk import RiskInputs

INVENTORY_EVIDENCE = f"ev:inventory:{fx.GROUP}"
_MODULE_PATH = re.compile(r"^src/(?P<pkg>[a-z_]+)/(?P<name>[a-z_]+)\.py$")


def access_evidence_id(repo: str) -> str:
    return f"ev:access:{repo}"


def doc_evidence_id(doc_id: str, section_id: str) -> str:
    return f"ev:doc:{doc_id}#{section_id}"


def code_evidence_id(repo: str, path: str, line: int) -> str:
    return f"ev:code:{repo}/{path}:{line}"


def accessible_repositories() -> tuple[str, ...]:
    return tuple(r for r in fx.REPOSITORIES if r != fx.NO_ACCESS_REPO)


def document(doc_id: str) -> fx.Document | None:
    return next((d for d in fx.DOCUMENTS if d.doc_id == doc_id), None)


def breaking_changes() -> tuple[fx.Section, ...]:
    """The guide's breaking-change sections (BC1..BC8), in guide order."""
    guide = document(fx.GUIDE_ID)
    assert guide is not None
    return tuple(s for s in guide.sections if "change_id" in s.fields)


def module_of(repo: str, path: str) -> str | None:
    """``src/<pkg>/<name>.py`` belongs to module ``<repo>/<name>``; other files to no module."""
    match = _MODULE_PATH.match(path)
    return f"{repo}/{match['name']}" if match else None


def is_test(path: str) -> bool:
    return path.startswith("tests/")


@dataclass(frozen=True)
class CodeHit:
    repository: str
    path: str
    line: int
    text: str
    module: str | None
    is_test: bool

    @property
    def evidence_id(self) -> str:
        return code_evidence_id(self.repository, self.path, self.line)


def search(repo: str, query: str) -> tuple[CodeHit, ...]:
    """Case-sensitive substring search over every file of ``repo`` (like a code host's literal search)."""
    hits = []
    for path, lines in sorted(fx.SOURCES.get(repo, {}).items()):
        for number, text in enumerate(lines, start=1):
            if query in text:
                hits.append(CodeHit(repo, path, number, text.strip(), module_of(repo, path), is_test(path)))
    return tuple(hits)


@dataclass(frozen=True)
class CallSite:
    hit: CodeHit
    change_id: str


@cache
def direct_call_sites() -> tuple[CallSite, ...]:
    """Every non-test line of an accessible repository matching a breaking change's search pattern."""
    found: dict[str, CallSite] = {}
    for repo in accessible_repositories():
        for bc in breaking_changes():
            for hit in search(repo, bc.fields["search_pattern"]):
                if not hit.is_test:
                    found.setdefault(hit.evidence_id, CallSite(hit, bc.fields["change_id"]))
    order = {r: i for i, r in enumerate(fx.REPOSITORIES)}
    return tuple(sorted(found.values(), key=lambda c: (order[c.hit.repository], c.hit.path, c.hit.line)))


@dataclass(frozen=True)
class IndirectUsage:
    hit: CodeHit
    via: str  # the wrapper module the call goes through


def indirect_usages() -> tuple[IndirectUsage, ...]:
    usages = []
    for repo, path, marker, via in fx.INDIRECT_MARKERS:
        hits = [h for h in search(repo, marker) if h.path == path]
        assert len(hits) == 1, f"indirect marker {marker!r} must match one line of {repo}/{path}"
        usages.append(IndirectUsage(hits[0], via))
    return tuple(usages)


def covering_tests(module: str) -> tuple[CodeHit, ...]:
    """Import lines in the repository's tests that name the module's dotted path."""
    repo, _, name = module.partition("/")
    dotted = f"{repo.replace('-', '_')}.{name}"
    return tuple(h for h in search(repo, f"from {dotted} import") if h.is_test)


def known_modules() -> tuple[str, ...]:
    modules = {module_of(r, p) for r in accessible_repositories() for p in fx.SOURCES.get(r, {})}
    return tuple(sorted(m for m in modules if m is not None))


def risk_inputs(module: str) -> RiskInputs:
    sites = [c for c in direct_call_sites() if c.hit.module == module]
    change_ids = tuple(sorted({c.change_id for c in sites}, key=lambda c: int(c[2:])))
    removed = {s.fields["change_id"] for s in breaking_changes() if s.fields["change_type"] == "removed"}
    return RiskInputs(
        module=module,
        call_sites=len(sites),
        change_ids=change_ids,
        removed_api=bool(removed & set(change_ids)),
        covering_tests=len(covering_tests(module)),
        money_movement=module in fx.MONEY_MOVEMENT,
    )


def module_call_site_evidence(module: str) -> tuple[str, ...]:
    return tuple(c.hit.evidence_id for c in direct_call_sites() if c.hit.module == module)


@cache
def all_evidence() -> Mapping[str, str]:
    """Every evidence id the fixtures can back, mapped to a human-readable location."""
    out = {INVENTORY_EVIDENCE: f"repository inventory of {fx.GROUP}"}
    out.update({access_evidence_id(r): f"access check of {r}" for r in fx.REPOSITORIES})
    for doc in fx.DOCUMENTS:
        for s in doc.sections:
            out[doc_evidence_id(doc.doc_id, s.section_id)] = f"{doc.title} / {s.heading}"
    for repo, files in fx.SOURCES.items():
        for path, lines in files.items():
            for number in range(1, len(lines) + 1):
                out[code_evidence_id(repo, path, number)] = f"{repo}/{path} line {number}"
    return MappingProxyType(out)


def resolve_evidence(evidence_id: str) -> str | None:
    return all_evidence().get(evidence_id)
