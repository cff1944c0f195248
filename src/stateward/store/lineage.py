"""Forks share their source's history by reference: how both stores read a fork's events and artifacts.

A fork's row names the run it was forked from and the last event of that run it shares
(``forked_from``, ``fork_seq``); its own event rows start after that event. Nothing of the source is
copied: reading the fork's events reads the source's rows up to ``fork_seq`` (the source's own source up
to its bound, and so on) followed by the fork's own. A source's rows are never changed by a fork, and
events the source appends after ``fork_seq`` are never seen by the fork.

Artifacts follow the same rule: a fork sees a source's artifact version if the fork's state at the fork
point knew it (versions grow per name, so those are exactly the versions written before the fork point),
and the content-addressed payload artifacts its shared events refer to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from stateward.core.errors import ErrorCode, StoreError
from stateward.core.events import Event
from stateward.store.records import ArtifactRecord

PAYLOAD_PREFIX = "payload-"  # observability/payloads.py's offloaded payloads (the store imports no layer above it)
MAX_FORK_DEPTH = 100  # a fork of a fork of ...: reads walk at most this many sources
Fork = tuple[str, int]  # (source run id, the source's last event the fork shares)
ForkOf = Callable[[str], "Fork | None"]
ReadOwn = Callable[[str, str, int, "int | None", "int | None"], list[Event]]
"""(run id, label run id, after seq, upper seq or None, limit or None) -> that run's own events."""


def read_lineage(
    fork_of: ForkOf,
    read_own: ReadOwn,
    run_id: str,
    after: int,
    limit: int | None,
    *,
    label: str | None = None,
    upper: int | None = None,
    depth: int = 0,
) -> list[Event]:
    """The events of ``run_id`` numbered above ``after`` (at most ``limit``; none above ``upper``): its
    sources' shared prefix first, then its own; each labelled with ``label`` (the run asked about)."""
    if depth > MAX_FORK_DEPTH:
        raise too_deep(run_id)
    name = label or run_id
    out: list[Event] = []
    fork = fork_of(run_id)
    if fork is not None:
        source, at = fork
        bound = at if upper is None else min(at, upper)
        if after < bound:
            out = read_lineage(fork_of, read_own, source, after, limit, label=name, upper=bound, depth=depth + 1)
        if limit is not None and len(out) >= limit:
            return out[:limit]
        after = max(after, at)
    if upper is not None and after >= upper:
        return out
    left = None if limit is None else limit - len(out)
    return out + read_own(run_id, name, after, upper, left)


def inherited_artifact(
    fork_of: ForkOf,
    own: Callable[[str, str, int | None], ArtifactRecord | None],
    known: Callable[[str], Mapping[str, int]],
    run_id: str,
    name: str,
    version: int | None,
    depth: int = 0,
) -> ArtifactRecord | None:
    """``run_id``'s artifact ``name`` (version ``version``, the latest when None): its own row, else the row
    of the source it shares that version with. ``known(run_id)`` is a fork's artifact versions at its fork point."""
    if depth > MAX_FORK_DEPTH:
        raise too_deep(run_id)
    found = own(run_id, name, version)
    if found is not None:
        return found
    fork = fork_of(run_id)
    if fork is None:
        return None
    if name.startswith(PAYLOAD_PREFIX):
        return inherited_artifact(fork_of, own, known, fork[0], name, version, depth + 1)
    shared = known(run_id).get(name)
    if shared is None or (version is not None and version > shared):
        return None
    found = inherited_artifact(fork_of, own, known, fork[0], name, shared if version is None else version, depth + 1)
    return None if found is None else found.model_copy(update={"run_id": run_id})


def inherited_artifacts(
    fork_of: ForkOf,
    own: Callable[[str], list[ArtifactRecord]],
    known: Callable[[str], Mapping[str, int]],
    run_id: str,
    depth: int = 0,
) -> list[ArtifactRecord]:
    """Every artifact version ``run_id`` sees (its sources' shared ones and its own), by name then version."""
    if depth > MAX_FORK_DEPTH:
        raise too_deep(run_id)
    mine = own(run_id)
    fork = fork_of(run_id)
    if fork is None:
        return mine
    shared = known(run_id)
    taken = {(a.name, a.version) for a in mine}
    theirs = [
        a.model_copy(update={"run_id": run_id})
        for a in inherited_artifacts(fork_of, own, known, fork[0], depth + 1)
        if a.version <= shared.get(a.name, 0) and (a.name, a.version) not in taken
    ]
    return sorted([*theirs, *mine], key=lambda a: (a.name, a.version))


def too_deep(run_id: str) -> StoreError:
    return StoreError(
        f"run {run_id} is a fork more than {MAX_FORK_DEPTH} forks deep",
        code=ErrorCode.STORE_CORRUPT,
        details={"run_id": run_id},
    )
