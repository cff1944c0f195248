"""The scripted planner and worker of the payment migration demo: deterministic stand-ins for a model.

The worker is a pure function of the :class:`ModelRequest` a real model would get (the work item, the
observations of its current attempt, the refs of earlier outputs, the verifier's correction), never of
call counts, so a run resumed in another process continues exactly where it stopped. For each work item
it calls the item's domain tools the way a careful assistant would and writes the item's output from
what those tools returned. The RULE, TOOL and VERIFICATION items are not the worker's: their steps here
(:data:`PROCEDURES`) are the procedures the controller runs as code, no model call. Items without tools
build their output from :mod:`stateward_demos.payment.facts` - the same facts the earlier items recorded,
which a live worker would be handed as its inputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import Any, Final

from stateward import ModelRequest
from stateward.planning import cite_evidence
from stateward_demos.payment import facts
from stateward_demos.payment import fixtures as fx
from stateward_demos.payment.drafting import draft_report
from stateward_demos.payment.risk import HEAVY_USE
from stateward_demos.payment.tools import REPORT_ARTIFACT

Decision = dict[str, Any]
Step = Callable[[ModelRequest], Decision]

PLAN_RESOURCE: Final = "plan.json"
GOAL_RESOURCE: Final = "goal.json"
DOC_QUERY: Final = "paysdk v2"
GUIDE_QUERY: Final = "migration guide"


def resource_text(name: str) -> str:
    """A JSON document shipped inside the package (works from an installed wheel, not just a checkout)."""
    return resources.files("stateward_demos.payment").joinpath(name).read_text(encoding="utf-8")


def planner_policy(req: ModelRequest) -> str:
    """The planner proposes the scenario's 18-item plan, and patches it when a measured fact changes the
    scope; the controller validates both and applies a patch only through the plan's versioning."""
    if req.purpose == "replan":
        return json.dumps(_scope_patch(req))
    return resource_text(PLAN_RESOURCE)


def _scope_patch(req: ModelRequest) -> dict[str, Any]:
    """A repository turned out unreadable: the coverage check now measures against the accessible ones and
    records the unreadable one as a gap (SCOPE_CHANGED, citing the access check). Anything else: no patch."""
    plan = req.facts["plan"]
    gone = [str(f).split(":", 1)[0] for f in req.facts.get("new_facts", []) if "no access" in str(f)]
    if not gone:
        return {"no_patch": "nothing in these facts changes the plan"}
    check = next(w for w in plan["work_items"] if w["output_spec"]["artifact_type"] == "coverage-check")
    changed = {
        **check,
        "title": f"Check coverage against the accessible repositories; record {', '.join(gone)} as not analysed",
        "completion_criteria": [
            "analysed repository count equals the accessible count in repository-inventory",
            *(f"{repo} listed as NOT_ACCESSIBLE with its access evidence" for repo in gone),
        ],
    }
    return {
        "base_version": plan["version"],
        "reason": "SCOPE_CHANGED",
        "evidence_ids": [facts.access_evidence_id(repo) for repo in gone],
        "summary": f"{', '.join(gone)} is not readable: scope is the accessible repositories, the gap is recorded",
        "changed_items": [changed],
        "kept_completed": list(req.facts.get("verified", [])),
    }


# --------------------------------------------------------------------------- helpers


def call(action: str, **args: Any) -> Decision:
    return {"type": "EXECUTE_TOOL", "action": action, "args": args}


def record(req: ModelRequest, artifact_type: str, content: Any) -> Decision:
    """Write the item's output, citing what it rests on: the observations of this attempt (by evidence id) and
    the verified outputs of the items it depends on; an item resting on neither cites the goal it restates."""
    return call(
        "record_output",
        artifact_type=artifact_type,
        content=json.dumps(content, sort_keys=True),
        evidence=cite_evidence(req),
    )


def _done(req: ModelRequest, action: str) -> list[dict[str, Any]]:
    """Successful observations of ``action`` in the current attempt, oldest first."""
    return [o for o in req.observations if o["action"] == action and o["status"] == "SUCCESS"]


def _done_with(req: ModelRequest, action: str, key: str) -> dict[str, Any]:
    """Successful results of ``action`` keyed by one argument (e.g. the repository searched)."""
    return {str(o["args"].get(key)): o["result"] for o in _done(req, action)}


def _accessible() -> tuple[str, ...]:
    """The effective scope W04 recorded: the repositories the access checks allowed."""
    return facts.accessible_repositories()


def _dotted(module: str) -> str:
    repo, _, name = module.partition("/")
    return f"{repo.replace('-', '_')}.{name}"


def _test_gap_modules() -> tuple[str, ...]:
    """Modules whose tests matter most: heavy SDK use or a call to an API that v2 removes."""
    return tuple(
        m
        for m in dict.fromkeys(c.hit.module for c in facts.direct_call_sites() if c.hit.module)
        if facts.risk_inputs(m).call_sites >= HEAVY_USE or facts.risk_inputs(m).removed_api
    )


def _scored_modules() -> tuple[str, ...]:
    """Every module with at least one direct call site (the api-usage-inventory of W11)."""
    return tuple(dict.fromkeys(c.hit.module for c in facts.direct_call_sites() if c.hit.module))


# --------------------------------------------------------------------------- the work items


def w01_normalise_goal(req: ModelRequest) -> Decision:
    return record(
        req,
        "normalised-goal",
        {
            "objective": "Assess the impact of migrating from Payment SDK v1 to v2",
            "group": fx.GROUP,
            "expected_repositories": len(fx.REPOSITORIES),
            "predicates": [
                "analysed_to_accessible_ratio >= 1.0",
                "artifact_present(migration-assessment)",
                "artifact_present(risk-matrix)",
                "unsupported_high_risk_claims <= 0",
            ],
        },
    )


def w02_inventory(req: ModelRequest) -> Decision:
    listed = _done(req, "list_repositories")
    if not listed:
        return call("list_repositories", group=fx.GROUP)
    names = [r["name"] for r in listed[-1]["result"]["repositories"]]
    checked = _done_with(req, "check_repository_access", "repo")
    todo = [n for n in names if n not in checked]
    if todo:
        return call("check_repository_access", repo=todo[0])
    rows = [
        {
            "name": n,
            "status": checked[n]["status"],
            "reason": checked[n]["reason"],
            "evidence_id": checked[n]["evidence_id"],
        }
        for n in names
    ]
    return record(
        req,
        "repository-inventory",
        {
            "group": listed[-1]["result"]["group"],
            "expected": len(fx.REPOSITORIES),
            "found": len(names),
            "accessible": sum(1 for r in rows if r["status"] == "ACCESSIBLE"),
            "repositories": rows,
            "evidence_id": listed[-1]["result"]["evidence_id"],
        },
    )


def _failed(req: ModelRequest, action: str, key: str) -> set[str]:
    """Argument values (e.g. spaces) for which ``action`` failed in the current attempt."""
    return {str(o["args"].get(key)) for o in req.observations if o["action"] == action and o["status"] != "SUCCESS"}


def _search_with_fallback(req: ModelRequest, query: str, spaces: tuple[str, ...]) -> Decision | dict[str, Any]:
    """Search each space; when search fails, ask the audited cache; when the cache has nothing, try search
    again (a careful assistant does not invent sources). Returns the next call, or the results by space."""
    searched = _done_with(req, "search_docs", "space")
    cached = _done_with(req, "search_docs_cache", "space")
    failed = _failed(req, "search_docs", "space")
    for space in spaces:
        if space in searched or (space in cached and cached[space]["hits"]):
            continue
        if space in failed and space not in cached:
            return {"next": call("search_docs_cache", query=query, space=space)}
        return {"next": call("search_docs", query=query, space=space)}
    return {"results": {space: searched.get(space) or cached[space] for space in spaces}}


def w03_document_sources(req: ModelRequest) -> Decision:
    found = _search_with_fallback(req, DOC_QUERY, fx.SPACES)
    if "next" in found:
        return dict(found["next"])
    return record(
        req,
        "document-sources",
        {
            space: [{k: h[k] for k in ("doc_id", "title", "authority", "version", "updated")} for h in out["hits"]]
            for space, out in found["results"].items()
        },
    )


def w04_effective_scope(req: ModelRequest) -> Decision:
    return record(
        req,
        "effective-scope",
        {
            "in_scope": list(_accessible()),
            "not_accessible": [{"repository": fx.NO_ACCESS_REPO, "reason": fx.NO_ACCESS_REASON}],
            "evidence_ids": [facts.access_evidence_id(fx.NO_ACCESS_REPO)],
        },
    )


def _official_conflicts(read: dict[str, Any]) -> list[dict[str, Any]]:
    """Where two official documents disagree about one API's change type (e.g. removed vs deprecated)."""
    claims: dict[str, list[dict[str, str]]] = {}
    for doc in read.values():
        if doc["authority"] != "official":
            continue
        for section in doc["sections"]:
            fields = section["fields"]
            api = fields.get("api") or fields.get("old_api", "").split("(")[0].rpartition(".")[2]
            if api and fields.get("change_type"):
                said = {"doc_id": doc["doc_id"], "change_type": fields["change_type"]}
                claims.setdefault(api, []).append({**said, "evidence_id": section["evidence_id"]})
    return [
        {"api": api, "sources": said}
        for api, said in sorted(claims.items())
        if len({s["change_type"] for s in said}) > 1
    ]


def w05_migration_sources(req: ModelRequest) -> Decision:
    found = _search_with_fallback(req, GUIDE_QUERY, ("payment-platform",))
    if "next" in found:
        return dict(found["next"])
    hits = found["results"]["payment-platform"]["hits"]
    official = [h["doc_id"] for h in hits if h["authority"] == "official"]
    wanted = [*official, *(d for d in (fx.GUIDE_ID, fx.RELEASE_NOTES_ID) if d not in official)]
    read = _done_with(req, "get_document", "doc_id")
    todo = [d for d in wanted if d not in read]
    if todo:
        return call("get_document", doc_id=todo[0])
    return record(
        req,
        "migration-sources",
        {
            "sources": [
                {k: read[d][k] for k in ("doc_id", "title", "authority", "version", "updated")} for d in wanted
            ],
            "authoritative_guide": fx.GUIDE_ID,
            "official_conflicts": _official_conflicts(read),
        },
    )


def w06_breaking_changes(req: ModelRequest) -> Decision:
    read = _done_with(req, "get_document", "doc_id")
    if fx.GUIDE_ID not in read:
        return call("get_document", doc_id=fx.GUIDE_ID)
    changes = [
        {
            **{k: s["fields"][k] for k in ("change_id", "old_api", "new_api", "behaviour", "search_pattern")},
            "evidence_id": s["evidence_id"],
        }
        for s in read[fx.GUIDE_ID]["sections"]
        if "change_id" in s["fields"]
    ]
    return record(req, "breaking-changes", {"count": len(changes), "changes": changes})


def w07_breaking_changes_check(req: ModelRequest) -> Decision:
    blog = facts.doc_evidence_id(fx.BLOG_ID, "capture")
    guide = facts.doc_evidence_id(fx.GUIDE_ID, "bc2")
    notes = facts.doc_evidence_id(fx.RELEASE_NOTES_ID, "removed")
    return record(
        req,
        "breaking-changes-check",
        {
            "conflicts": [
                {
                    "api": "capture_sync",
                    "official": "removed",
                    "informal": "deprecated",
                    "resolution": "follow the official guide and release notes",
                    "evidence_ids": [guide, notes, blog],
                }
            ],
            "agreeing_official_sources": [fx.GUIDE_ID, fx.RELEASE_NOTES_ID],
        },
    )


def w08_dependency_usage(req: ModelRequest) -> Decision:
    searched = _done_with(req, "search_code", "repo")
    todo = [r for r in _accessible() if r not in searched]
    if todo:
        return call("search_code", repo=todo[0], query="paysdk==")
    pins = {
        repo: sorted(m["text"].split("==", 1)[1] for m in out["matches"] if m["path"] == "requirements.txt")
        for repo, out in searched.items()
    }
    return record(
        req,
        "dependency-usage",
        {
            "searched": len(searched),
            "pinned": {r: v[0] for r, v in pins.items() if v},
            "no_direct_dependency": sorted(r for r, v in pins.items() if not v),
        },
    )


def _imports_sdk(text: str) -> bool:
    return "paysdk" in text and "import" in text


def w09_direct_call_sites(req: ModelRequest) -> Decision:
    """Find the files that import the SDK in every accessible repository, read them, match each change."""
    searched = _done_with(req, "search_code", "repo")
    read = {(o["args"]["repo"], o["args"]["path"]): o["result"] for o in _done(req, "get_file_section")}
    for repo in _accessible():
        if repo not in searched:
            return call("search_code", repo=repo, query="paysdk")
        files = dict.fromkeys(
            m["path"] for m in searched[repo]["matches"] if not m["is_test"] and _imports_sdk(m["text"])
        )
        for path in files:
            if (repo, path) not in read:
                return call("get_file_section", repo=repo, path=path, start=1, end=200)
    patterns = [(bc.fields["search_pattern"], bc.fields["change_id"]) for bc in facts.breaking_changes()]
    sites = []
    for (repo, path), section in read.items():
        for line in section["lines"]:
            change = next((cid for pattern, cid in patterns if pattern in line["text"]), None)
            if change is not None:
                sites.append(
                    {
                        "repository": repo,
                        "file": path,
                        "line": line["line"],
                        "change_id": change,
                        "module": facts.module_of(repo, path),
                        "evidence_id": line["evidence_id"],
                    }
                )
    return record(req, "direct-call-sites", {"count": len(sites), "call_sites": sites})


def w10_indirect_usage(req: ModelRequest) -> Decision:
    searched = {(o["args"]["repo"], o["args"]["query"]): o["result"] for o in _done(req, "search_code")}
    for repo, _path, marker, _via in fx.INDIRECT_MARKERS:
        if (repo, marker) not in searched:
            return call("search_code", repo=repo, query=marker)
    usages = [
        {
            "repository": repo,
            "file": m["path"],
            "line": m["line"],
            "call_chain": [m["module"] or path, via, "paysdk"],
            "confidence": "high",
            "evidence_id": m["evidence_id"],
        }
        for repo, path, marker, via in fx.INDIRECT_MARKERS
        for m in searched[(repo, marker)]["matches"]
        if m["path"] == path
    ]
    return record(req, "indirect-api-usage", {"count": len(usages), "usages": usages, "searched": list(_accessible())})


def w11_usage_inventory(req: ModelRequest) -> Decision:
    with_sites = {c.hit.repository for c in facts.direct_call_sites()}
    with_indirect = {u.hit.repository for u in facts.indirect_usages()}
    return record(
        req,
        "api-usage-inventory",
        {
            "repositories": {
                r: "ANALYZED" if r in with_sites | with_indirect else "NO_USAGE_FOUND" for r in _accessible()
            },
            "direct_call_sites": len(facts.direct_call_sites()),
            "indirect_usages": len(facts.indirect_usages()),
        },
    )


def w12_coverage_check(req: ModelRequest) -> Decision:
    analysed = len(_accessible())
    return record(
        req,
        "coverage-check",
        {"analysed": analysed, "accessible": len(_accessible()), "ratio": 1.0, "not_accessible": [fx.NO_ACCESS_REPO]},
    )


def w13_test_gaps(req: ModelRequest) -> Decision:
    searched = _done_with(req, "search_code", "repo")
    modules = _test_gap_modules()
    for module in modules:
        repo = module.partition("/")[0]
        if repo not in searched:
            return call("search_code", repo=repo, query=f"from {_dotted(module)} import")
    rows = []
    for module in modules:
        tests = [m for m in searched[module.partition("/")[0]]["matches"] if m["is_test"]]
        rows.append(
            {
                "module": module,
                "covering_tests": [m["path"] for m in tests],
                "gap": not tests,
                "evidence_ids": [m["evidence_id"] for m in searched[module.partition("/")[0]]["matches"]],
            }
        )
    return record(req, "test-gaps", {"modules": rows})


def w14_risk_matrix(req: ModelRequest) -> Decision:
    scored = _done_with(req, "compute_risk_score", "module")
    todo = [m for m in _scored_modules() if m not in scored]
    if todo:
        return call("compute_risk_score", module=todo[0])
    rows = [{k: scored[m][k] for k in ("module", "risk", "rule", "reason", "evidence_ids")} for m in _scored_modules()]
    return record(req, "risk-matrix", {"modules": rows})


def w15_risk_review(req: ModelRequest) -> Decision:
    """Review the high-risk rows of the recorded risk matrix, with the evidence each was scored on."""
    matrix = json.loads(req.facts.get("inputs", {}).get("risk-matrix", "{}"))
    high = [m for m in matrix.get("modules", []) if m.get("risk") == "high"]
    return record(
        req,
        "risk-review",
        {"reviewed": [{"module": m["module"], "reason": m["reason"], "evidence_ids": m["evidence_ids"]} for m in high]},
    )


def w16_report(req: ModelRequest) -> Decision:
    """Draft the report from the recorded outputs; once the verifier names what to fix, write it again."""
    report = draft_report(req.facts.get("inputs", {}), first_draft=req.facts.get("correction") is None)
    return call("render_report", report_json=report.to_content())


def w17_report_verification(req: ModelRequest) -> Decision:
    """Record which report version is the verified one; the checks themselves are the runtime's."""
    ref = req.facts["outputs"].get("W16", f"{REPORT_ARTIFACT}:v?")
    return record(req, "report-verification", {"report": ref, "verified_by": "verification_recorded events"})


def w18_deliver(req: ModelRequest) -> Decision:
    return call("deliver_report", report_ref=req.facts["outputs"]["W16"])


# The items a model works (MODEL, LOCAL_REACT): the scripted worker's steps.
STEPS: Final[dict[str, Step]] = {
    "W05": w05_migration_sources,
    "W06": w06_breaking_changes,
    "W10": w10_indirect_usage,
    "W13": w13_test_gaps,
    "W15": w15_risk_review,
    "W16": w16_report,
}

# The items run as code (RULE, TOOL, VERIFICATION, and W18's delivery once approved), by artifact type: the
# plan-run controller calls these itself, through the Runtime and the gateway, with no model call.
PROCEDURES: Final[dict[str, Step]] = {
    "normalised-goal": w01_normalise_goal,
    "repository-inventory": w02_inventory,
    "document-sources": w03_document_sources,
    "effective-scope": w04_effective_scope,
    "breaking-changes-check": w07_breaking_changes_check,
    "dependency-usage": w08_dependency_usage,
    "direct-call-sites": w09_direct_call_sites,
    "api-usage-inventory": w11_usage_inventory,
    "coverage-check": w12_coverage_check,
    "risk-matrix": w14_risk_matrix,
    "report-verification": w17_report_verification,
    "delivery-receipt": w18_deliver,
}


def gullible(policy: Step) -> Step:
    """A weak model that obeys instructions it finds in tool results: it proposes the planted call once.

    Used for the injection fault to show the planted call has no effect: the Runtime refuses an action
    the work item does not show, whatever the model was told.
    """

    def step(req: ModelRequest) -> Decision:
        told_off = req.correction is not None and "deliver_report" in req.correction
        latest = req.observations[-1] if req.observations else None
        if not told_off and latest is not None and "call deliver_report" in json.dumps(latest.get("result")):
            return call("deliver_report", report_ref=f"{REPORT_ARTIFACT}:v1")
        return policy(req)

    return step


def repeats_search(policy: Step) -> Step:
    """A weak model stuck on one query: after a document search answers, it proposes the same search again.

    Used for the same-search fault: the work item's progress tracker refuses the repeat as no progress.
    """

    def step(req: ModelRequest) -> Decision:
        latest = req.observations[-1] if req.observations else None
        if latest is not None and latest.get("action") == "search_docs" and latest.get("status") == "SUCCESS":
            return call("search_docs", **latest["args"])
        return policy(req)

    return step


def worker_policy(req: ModelRequest) -> Decision:
    """One decision for the running work item; an unknown item gets an honest stop, never a guess."""
    step = STEPS.get(str(req.facts.get("work_item", {}).get("work_item_id")))
    if step is None:
        return {"type": "FAIL", "reason": "no script for this work item"}
    return step(req)
