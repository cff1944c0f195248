"""The research tools of the payment migration scenario, named exactly as the plan's required capabilities.

Reads are side-effect free and return JSON-able dicts whose every fact carries an ``evidence_id`` (see
:mod:`stateward_demos.payment.facts` for the scheme), so the report can cite what the agent actually saw.
Refusals are classified exceptions, not error values: an unknown repository is INVALID_ARGUMENT, an
unreadable one PERMISSION_DENIED - except ``check_repository_access``, whose whole job is to *report*
NO_ACCESS, so it answers instead of raising.

``deliver_report`` is the one protected action: it needs an approval bound to the exact report version
and is journalled by the gateway as a side effect. Its remote system is simulated by an in-memory
delivery log keyed by idempotency key (a module-level dict by default, so a demo run and its resume in
the same process see the same deliveries); ``lookup`` reads that log, which lets the gateway reconcile a
delivery whose answer was lost instead of delivering twice.
"""

from __future__ import annotations

import json
import re
import time
from typing import Annotated, Any, Final

from pydantic import Field, ValidationError

from stateward import (
    LookupStatus,
    ToolContext,
    ToolInvalidArgument,
    ToolPermissionDenied,
    ToolRegistry,
    ToolSpec,
    ToolTimeout,
    tool,
)
from stateward.tools import BreakerPolicy, RetryPolicy
from stateward.verify import Report
from stateward_demos.payment import facts
from stateward_demos.payment import fixtures as fx
from stateward_demos.payment.faults import AUDITED_CACHE_SPACES, SEARCH_TIMEOUT_S, Fault, documents
from stateward_demos.payment.risk import score

REPORT_ARTIFACT: Final = "migration-assessment"
RECEIPT_ARTIFACT: Final = "delivery-receipt"
DELIVERY_SPACE: Final = "payment-platform"
MAX_SECTION_LINES: Final = 200
_REPORT_REF = re.compile(rf"^{REPORT_ARTIFACT}:v[1-9][0-9]*$")

# The simulated delivery target: idempotency key -> receipt. Shared by default; tests pass their own.
DELIVERY_LOG: dict[str, dict[str, str]] = {}


def _known_repo(repo: str) -> None:
    if repo not in fx.REPOSITORIES:
        raise ToolInvalidArgument(f"no repository {repo!r} in {fx.GROUP}")


def _readable_repo(repo: str) -> None:
    _known_repo(repo)
    if repo == fx.NO_ACCESS_REPO:
        raise ToolPermissionDenied(f"{repo}: {fx.NO_ACCESS_REASON}")


def _section(doc: fx.Document, s: fx.Section) -> dict[str, Any]:
    return {
        "section_id": s.section_id,
        "heading": s.heading,
        "text": s.text,
        "fields": dict(s.fields),
        "evidence_id": facts.doc_evidence_id(doc.doc_id, s.section_id),
    }


def _doc_header(doc: fx.Document) -> dict[str, Any]:
    return {
        "doc_id": doc.doc_id,
        "title": doc.title,
        "space": doc.space,
        "authority": doc.authority,
        "version": doc.version,
        "updated": doc.updated,
    }


def _section_terms(s: fx.Section) -> str:
    return " ".join([s.heading, s.text, *s.fields.values()]).lower()


@tool
def list_repositories(group: str = fx.GROUP) -> dict[str, Any]:
    """List the repositories of a repository group (the scope the goal names)."""
    if group != fx.GROUP:
        raise ToolInvalidArgument(f"unknown repository group {group!r}; known: {fx.GROUP}")
    return {
        "group": group,
        "count": len(fx.REPOSITORIES),
        "repositories": [{"name": r} for r in fx.REPOSITORIES],
        "evidence_id": facts.INVENTORY_EVIDENCE,
    }


@tool(scope_arg="repo")
def check_repository_access(repo: str) -> dict[str, Any]:
    """Say whether the research account can read a repository: ACCESSIBLE or NO_ACCESS with the reason."""
    _known_repo(repo)
    denied = repo == fx.NO_ACCESS_REPO
    return {
        "repository": repo,
        "status": "NO_ACCESS" if denied else "ACCESSIBLE",
        "reason": fx.NO_ACCESS_REASON if denied else "",
        "evidence_id": facts.access_evidence_id(repo),
    }


def _search(docs: tuple[fx.Document, ...], query: str, space: str | None) -> dict[str, Any]:
    if space is not None and space not in fx.SPACES:
        raise ToolInvalidArgument(f"unknown space {space!r}; known: {', '.join(fx.SPACES)}")
    terms = set(re.findall(r"[a-z0-9_]{2,}", query.lower()))
    ranked: list[tuple[int, dict[str, Any]]] = []
    for doc in docs:
        if space is not None and doc.space != space:
            continue
        matched = [s for s in doc.sections if any(t in _section_terms(s) for t in terms)]
        if not matched:
            continue
        hit_terms = sum(1 for t in terms if any(t in _section_terms(s) for s in doc.sections))
        sections = [
            {
                "section_id": s.section_id,
                "heading": s.heading,
                "evidence_id": facts.doc_evidence_id(doc.doc_id, s.section_id),
            }
            for s in matched
        ]
        ranked.append((hit_terms, {**_doc_header(doc), "sections": sections}))
    ranked.sort(key=lambda item: (-item[0], item[1]["authority"] != "official", item[1]["doc_id"]))
    return {"query": query, "space": space, "hits": [hit for _, hit in ranked]}


def _get(docs: tuple[fx.Document, ...], doc_id: str, section: str | None) -> dict[str, Any]:
    doc = next((d for d in docs if d.doc_id == doc_id), None)
    if doc is None:
        raise ToolInvalidArgument(f"no document {doc_id!r}")
    sections = [s for s in doc.sections if section is None or s.section_id == section]
    if not sections:
        raise ToolInvalidArgument(f"document {doc_id!r} has no section {section!r}")
    return {**_doc_header(doc), "sections": [_section(doc, s) for s in sections]}


def document_tools(fault: Fault | None = None) -> list[ToolSpec]:
    """search_docs and get_document over the corpus the run meets under ``fault``; with document search
    timing out, search_docs always times out (bounded retries, then its breaker opens) and the audited
    read-only cache ``search_docs_cache`` is the fallback."""
    docs = documents(fault)

    if fault is Fault.DOC_SEARCH_TIMEOUT:

        @tool(retry=RetryPolicy(max_attempts=2, backoff_base_s=0.0), breaker=BreakerPolicy(failure_threshold=3))
        def search_docs(query: Annotated[str, Field(min_length=1)], space: str | None = None) -> dict[str, Any]:
            """Search the documentation spaces (engineering, payment-platform); hits list matching sections."""
            raise ToolTimeout("document search did not answer within its timeout")

    elif fault is Fault.DOC_SEARCH_TIMEOUT_ONCE:
        slowed: set[str] = set()  # runs whose first search answered too late (one registry per agent build)

        @tool(timeout_s=SEARCH_TIMEOUT_S, retry=RetryPolicy(max_attempts=2, backoff_base_s=0.0))
        def search_docs(
            query: Annotated[str, Field(min_length=1)], ctx: ToolContext, space: str | None = None
        ) -> dict[str, Any]:
            """Search the documentation spaces (engineering, payment-platform); hits list matching sections."""
            if ctx.run_id not in slowed:
                slowed.add(ctx.run_id)
                time.sleep(SEARCH_TIMEOUT_S * 4)  # the search service answers after the gateway gave up
            return _search(docs, query, space)

    else:

        @tool
        def search_docs(query: Annotated[str, Field(min_length=1)], space: str | None = None) -> dict[str, Any]:
            """Search the documentation spaces (engineering, payment-platform); hits list matching sections."""
            return _search(docs, query, space)

    @tool
    def search_docs_cache(query: Annotated[str, Field(min_length=1)], space: str | None = None) -> dict[str, Any]:
        """The audited read-only cache of document search (a fallback when search is down); may be incomplete."""
        cached = tuple(d for d in docs if d.space in AUDITED_CACHE_SPACES)
        return {**_search(cached, query, space), "source": "audited-cache"}

    @tool
    def get_document(doc_id: str, section: str | None = None) -> dict[str, Any]:
        """Read a document (or one section of it); every section carries its evidence id."""
        return _get(docs, doc_id, section)

    return [search_docs, search_docs_cache, get_document]


@tool(scope_arg="repo")
def search_code(repo: str, query: Annotated[str, Field(min_length=1)]) -> dict[str, Any]:
    """Literal (case-sensitive) code search in one repository; each match has file, line and evidence id."""
    _readable_repo(repo)
    hits = facts.search(repo, query)
    matches = [
        {
            "path": h.path,
            "line": h.line,
            "text": h.text,
            "module": h.module,
            "is_test": h.is_test,
            "evidence_id": h.evidence_id,
        }
        for h in hits
    ]
    return {"repository": repo, "query": query, "count": len(matches), "matches": matches}


@tool(scope_arg="repo")
def get_file_section(
    repo: str, path: str, start: Annotated[int, Field(ge=1)], end: Annotated[int, Field(ge=1)]
) -> dict[str, Any]:
    """Read lines start..end (inclusive, 1-based) of a file; the end is clamped to the file's length."""
    _readable_repo(repo)
    lines = fx.SOURCES[repo].get(path)
    if lines is None:
        raise ToolInvalidArgument(f"no file {path!r} in {repo}")
    if end < start or end - start >= MAX_SECTION_LINES:
        raise ToolInvalidArgument(f"need start <= end and at most {MAX_SECTION_LINES} lines, got {start}..{end}")
    if start > len(lines):
        raise ToolInvalidArgument(f"{repo}/{path} has {len(lines)} lines; start {start} is past the end")
    last = min(end, len(lines))
    return {
        "repository": repo,
        "path": path,
        "start": start,
        "end": last,
        "total_lines": len(lines),
        "lines": [
            {"line": n, "text": lines[n - 1], "evidence_id": facts.code_evidence_id(repo, path, n)}
            for n in range(start, last + 1)
        ],
    }


@tool
def compute_risk_score(module: str) -> dict[str, Any]:
    """Score a module's migration risk with the fixed rule list; the answer names the rule that fired.

    The inputs are read from the code index, not taken from the caller, so a model cannot talk a
    module's risk down by reporting fewer call sites.
    """
    if module not in facts.known_modules():
        raise ToolInvalidArgument(f"unknown module {module!r}; modules look like 'checkout-api/charge'")
    inputs = facts.risk_inputs(module)
    result = score(inputs)
    return {
        "module": module,
        "repository": module.partition("/")[0],
        "risk": result.risk.value,
        "rule": result.rule,
        "reason": result.reason,
        "inputs": {
            "call_sites": inputs.call_sites,
            "breaking_changes": list(inputs.change_ids),
            "removed_api": inputs.removed_api,
            "covering_tests": inputs.covering_tests,
            "money_movement": inputs.money_movement,
        },
        "evidence_ids": list(facts.module_call_site_evidence(module)),
    }


@tool
def render_report(report_json: str, ctx: ToolContext) -> dict[str, Any]:
    """Validate a migration-assessment report (JSON) and store it as the next 'migration-assessment' version."""
    try:
        report = Report.model_validate_json(report_json)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"]) or "(root)", "error": e["msg"]} for e in exc.errors()[:20]
        ]
        summary = "; ".join(f"{e['field']}: {e['error']}" for e in errors[:5])
        raise ToolInvalidArgument(
            f"report has {exc.error_count()} schema error(s): {summary}", details={"field_errors": errors}
        ) from exc
    content = report.to_content()
    ctx.emit_artifact(REPORT_ARTIFACT, content, media_type="application/json")
    return {"artifact": REPORT_ARTIFACT, "sections": len(report.sections)}


def make_tools(delivery_log: dict[str, dict[str, str]] | None = None, fault: Fault | None = None) -> ToolRegistry:
    """The scenario's registry under ``fault`` (None: the happy path). ``delivery_log`` is the simulated
    delivery target (default: DELIVERY_LOG)."""
    log = DELIVERY_LOG if delivery_log is None else delivery_log

    def lookup(key: str) -> tuple[LookupStatus, Any]:
        receipt = log.get(key)
        return (LookupStatus.SUCCEEDED, dict(receipt)) if receipt else (LookupStatus.NOT_EXECUTED, None)

    @tool(side_effect=True, requires_approval=True, lookup=lookup)
    def deliver_report(report_ref: str, ctx: ToolContext) -> dict[str, str]:
        """Publish an approved report version (e.g. 'migration-assessment:v2') to the payment-platform space."""
        if not _REPORT_REF.match(report_ref):
            raise ToolInvalidArgument(f"{report_ref!r} is not a report reference like '{REPORT_ARTIFACT}:v2'")
        receipt = log.get(ctx.idempotency_key)
        if receipt is None:  # the remote side deduplicates on the key, as a real delivery API would
            receipt = {
                "delivered": report_ref,
                "space": DELIVERY_SPACE,
                "receipt_id": f"rcpt-{ctx.idempotency_key[-12:]}",
            }
            log[ctx.idempotency_key] = receipt
        ctx.emit_artifact(RECEIPT_ARTIFACT, json.dumps(receipt, sort_keys=True), media_type="application/json")
        return dict(receipt)

    return ToolRegistry(
        [
            list_repositories,
            check_repository_access,
            *document_tools(fault),
            search_code,
            get_file_section,
            compute_risk_score,
            render_report,
            deliver_report,
        ]
    )
