"""The report artifact that verification checks, and the versioned, content-hashed wrapper around it.

A :class:`Report` keeps the numbers it *states* (``stated``) apart from the items it *lists*, so a
deterministic check can compare them ("8 breaking changes" must list 8). An :class:`ArtifactVersion` is
immutable and named ``name:vN``; a repair produces ``name:vN+1`` with a new hash and never touches vN.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from stateward.core.canonical import canonical_json, sha256_hex
from stateward.planning.delivery import Confidence, FindingRisk


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReportSection(_Frozen):
    """One titled section of a report, with the claims it makes."""

    section_id: str = Field(min_length=1)
    title: str = ""
    body: str = ""


class Claim(_Frozen):
    """A key conclusion; its risk level and the evidence backing it are data, not prose."""

    claim_id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    risk: FindingRisk
    confidence: Confidence = Confidence.MEDIUM
    evidence_ids: tuple[str, ...] = ()


class BreakingChange(_Frozen):
    """One breaking change of the SDK, with the evidence that documents it."""

    change_id: str = Field(min_length=1)
    title: str = ""
    evidence_ids: tuple[str, ...] = ()


class CallSite(_Frozen):
    """One place in a repository that calls a changed API, with the evidence that found it."""

    call_site_id: str = Field(min_length=1)
    repository: str = Field(min_length=1)
    module: str = ""
    location: str = ""
    evidence_ids: tuple[str, ...] = ()


class ModuleRisk(_Frozen):
    """The migration risk of one module, with the evidence it was assessed from."""

    module: str = Field(min_length=1)
    repository: str = ""
    risk: FindingRisk
    evidence_ids: tuple[str, ...] = ()


class CoverageStatus(StrEnum):
    """Whether a repository was analysed or could not be reached (a listed gap, not an omission)."""

    ANALYZED = "ANALYZED"
    NOT_ACCESSIBLE = "NOT_ACCESSIBLE"  # explicitly listed as a gap: part of the result, not an omission


class RepositoryCoverage(_Frozen):
    """One expected repository and whether the report covers it."""

    repository: str = Field(min_length=1)
    status: CoverageStatus
    note: str = ""


class StatedCounts(_Frozen):
    """The numbers the report's text states; checked against what it lists."""

    repositories_expected: int | None = None
    repositories_accessible: int | None = None
    repositories_analyzed: int | None = None
    breaking_changes: int | None = None
    call_sites: int | None = None
    modules_by_risk: dict[FindingRisk, int] = Field(default_factory=dict)


class Report(_Frozen):
    """A migration-assessment style report (sections, claims, listed findings, coverage, stated counts)."""

    title: str = Field(min_length=1)
    sections: tuple[ReportSection, ...] = ()
    claims: tuple[Claim, ...] = ()
    breaking_changes: tuple[BreakingChange, ...] = ()
    call_sites: tuple[CallSite, ...] = ()
    module_risks: tuple[ModuleRisk, ...] = ()
    coverage: tuple[RepositoryCoverage, ...] = ()
    stated: StatedCounts = StatedCounts()

    def evidence_refs(self) -> tuple[str, ...]:
        """Every evidence id the report cites, in order, without repeats."""
        refs: list[str] = []
        for group in (self.claims, self.breaking_changes, self.call_sites, self.module_risks):
            for entry in group:
                refs.extend(entry.evidence_ids)
        return tuple(dict.fromkeys(refs))

    def highest_risk(self) -> FindingRisk:
        """The highest risk among the report's claims and module risks."""
        return FindingRisk.highest([c.risk for c in self.claims] + [m.risk for m in self.module_risks])

    def to_content(self) -> str:
        """The canonical JSON text the artifact stores and hashes."""
        return canonical_json(self.model_dump(mode="json"))


class ArtifactVersion(_Frozen):
    """One immutable version of a named artifact; ``sha256`` is the hash of ``content`` when it was made."""

    name: str = Field(min_length=1)
    version: PositiveInt
    content: str
    sha256: str
    media_type: str = "application/json"
    parent: str | None = None  # the ref this version was repaired from

    @property
    def ref(self) -> str:
        """The version's stable reference, ``name:vN``."""
        return f"{self.name}:v{self.version}"

    @classmethod
    def create(
        cls, name: str, content: str | Report, *, version: int = 1, parent: str | None = None
    ) -> ArtifactVersion:
        """A version of ``content`` with its hash, so later versions can cite their parent."""
        text = content.to_content() if isinstance(content, Report) else content
        return cls(name=name, version=version, content=text, sha256=sha256_hex(text), parent=parent)

    def next_version(self, content: str | Report) -> ArtifactVersion:
        """A new version (vN+1) with its own hash; this version is left as it is."""
        return ArtifactVersion.create(self.name, content, version=self.version + 1, parent=self.ref)

    def report(self) -> Report:
        """The content as a :class:`Report` (raises pydantic's ValidationError if it is not one)."""
        return Report.model_validate_json(self.content)

    def to_store(self) -> dict[str, Any]:
        """Fields for :class:`stateward.store.records.NewArtifact` (name, version, content, media_type)."""
        return {"name": self.name, "version": self.version, "content": self.content, "media_type": self.media_type}
