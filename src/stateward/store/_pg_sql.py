"""The SQL of the PostgreSQL store, kept apart so ``postgres.py`` reads as the SQLite store does.

Lease times come from the database clock (``DB_EPOCH``), never from a worker's, so workers on
machines whose clocks disagree still agree on who holds a run.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Seconds since the epoch by the database clock, read when the statement runs (not at transaction start).
DB_EPOCH = "extract(epoch from clock_timestamp())::float8"

# Held for the migration transaction only; serialises stores opening the same database at once.
MIGRATION_LOCK_KEY = 0x5354_4154_4557  # "STATEW"

SCHEMA_TABLE = """CREATE TABLE IF NOT EXISTS stateward_schema (
    version INTEGER PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"""
SCHEMA_TABLE_EXISTS = "SELECT to_regclass('stateward_schema') IS NOT NULL"
SCHEMA_VERSION = "SELECT coalesce(max(version), 0) FROM stateward_schema"
SCHEMA_RECORD = "INSERT INTO stateward_schema(version) VALUES (%s)"

# -- runs -------------------------------------------------------------------------------------------
CREATE_RUN = """INSERT INTO runs(run_id, tenant, agent, agent_version, status, terminal_reason, snapshot, parts,
        last_seq, goal)
    VALUES (%(run_id)s, %(tenant)s, %(agent)s, %(agent_version)s, %(status)s, %(reason)s, %(snapshot)s, %(parts)s,
        %(new_seq)s, %(goal)s)
    ON CONFLICT (run_id) DO NOTHING RETURNING created_at AS at"""
SNAPSHOT = "SELECT snapshot, last_seq, parts FROM runs WHERE run_id=%s"
# Large memo entries stored apart (store/parts.py): immutable, so read outside the row's transaction.
INSERT_PART = "INSERT INTO state_parts(run_id, digest, body) VALUES (%s,%s,%s) ON CONFLICT DO NOTHING"
READ_PARTS = "SELECT digest, body FROM state_parts WHERE run_id=%s AND digest = ANY(%s)"
LAST_SEQ = "SELECT last_seq FROM runs WHERE run_id=%s"
GET_CONTROL = "SELECT control FROM runs WHERE run_id=%s"
SET_CONTROL = "UPDATE runs SET control=%s WHERE run_id=%s"
RUN_GUARD_ROW = "SELECT last_seq, lease_owner, lease_version FROM runs WHERE run_id=%s"
RUN_COLUMNS = """run_id, tenant, agent, status, terminal_reason, last_seq, created_at, updated_at,
    CASE WHEN lease_expires_at > extract(epoch from clock_timestamp()) THEN lease_owner END, agent_version, goal,
    forked_from, fork_seq"""
LIST_RUNS = f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at DESC, run_id DESC LIMIT %s"


def page_runs(columns: list[str], after: bool, *, search: bool = False) -> str:
    """A page of runs newest first: ``columns`` equal their parameters, ``after`` starts past a cursor's key.

    ``search``: of the newest ``%s`` (SEARCH_WINDOW) runs so filtered (read from runs_search for a tenant),
    those whose id starts with a pattern (LIKE) or whose goal holds one (ILIKE); the parameters end with
    the window, the two patterns and the page's limit."""
    clause = _runs_where(columns, after)
    order = " ORDER BY created_at DESC, run_id DESC"
    if not search:
        return f"SELECT {RUN_COLUMNS} FROM runs{clause}{order} LIMIT %s"
    scanned = f"SELECT run_id, created_at, goal FROM runs{clause}{order} LIMIT %s"
    return (  # only the page's keys are picked from the window (rows are read for those alone)
        f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id IN (SELECT s.run_id FROM ({scanned}) AS s"
        " WHERE s.run_id LIKE %s ESCAPE '\\' OR s.goal ILIKE %s ESCAPE '\\'"
        " ORDER BY s.created_at DESC, s.run_id DESC LIMIT %s)"
        f"{order}"
    )


def runs_window_edge(columns: list[str], after: bool) -> str:
    """The key of the oldest run a search's window read (none if the window was not full): ``OFFSET %s``."""
    clause = _runs_where(columns, after)
    return f"SELECT created_at, run_id FROM runs{clause} ORDER BY created_at DESC, run_id DESC LIMIT 1 OFFSET %s"


def _runs_where(columns: list[str], after: bool) -> str:
    where = [f"{column}=%s" for column in columns]
    if after:
        where.append("(created_at, run_id) < (%s::timestamptz, %s)")
    return f" WHERE {' AND '.join(where)}" if where else ""


def page_requests(*, run_id: bool, tenant: bool, open_only: bool, after: bool, columns: tuple[str, ...] = ()) -> str:
    """A page of requests in (run_id, request_id) order, each flag adding its condition; ``columns`` (of
    paging.REQUEST_FILTER_COLUMNS) each equal a parameter, after the tenant's."""
    where = [
        cond
        for cond, on in (
            ("p.run_id=%s", run_id),
            ("p.tenant=%s", tenant),  # the request's own copy of its run's tenant, indexed with the order
            *((f"p.{column}=%s", True) for column in columns),
            ("p.answer IS NULL", open_only),
            ("(p.run_id, p.request_id) > (%s, %s)", after),
        )
        if on
    ]
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return (
        "SELECT p.run_id, p.body, p.answer, r.tenant, p.request_id, r.snapshot::json->'parent'->>'run_id'"
        f" FROM pending_requests AS p JOIN runs AS r ON r.run_id=p.run_id{clause}"
        " ORDER BY p.run_id, p.request_id LIMIT %s"
    )


def step_update(*, leased: bool, clear_control: bool, release: bool = False) -> str:
    """The guarded snapshot update of ``commit_step``; it matches no row unless the write may happen.
    ``release`` (leased only) gives the lease up in the same statement."""
    guard = (
        "lease_owner=%(owner)s AND lease_version=%(version)s"
        if leased
        else f"(lease_owner IS NULL OR lease_expires_at < {DB_EPOCH})"
    )
    return (
        "UPDATE runs SET status=%(status)s, terminal_reason=%(reason)s, snapshot=%(snapshot)s, parts=%(parts)s,"
        " last_seq=%(new_seq)s, updated_at=now(), not_before=%(not_before)s"
        + ("" if leased and not release else ", queued_at=now()")  # see claim_next: leased steps stay HOT
        + (", control=NULL" if clear_control else "")
        + (", lease_owner=NULL, lease_expires_at=NULL" if release and leased else "")
        + f" WHERE run_id=%(run_id)s AND last_seq=%(expected)s AND {guard} RETURNING now() AS at"
    )


@dataclass(frozen=True)
class Positional:
    """A statement with ``$n`` placeholders, for psycopg's ``RawCursor``, and its parameters' names in
    order. Named ``%(name)s`` parameters are rewritten by psycopg on every call: on a step's statement,
    about as much client time as the server spends on it."""

    sql: str
    names: tuple[str, ...]
    _pick: Callable[[Mapping[str, Any]], Any] = field(init=False, repr=False, compare=False)
    name: bytes = field(init=False, compare=False)  # as a prepared statement (see ``prepare_steps``)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pick", operator.itemgetter(*self.names) if self.names else lambda _: ())
        object.__setattr__(self, "name", b"stateward_" + hashlib.sha256(self.sql.encode()).hexdigest()[:16].encode())

    def values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """``params`` in placeholder order (a name used twice is sent once); one C call (itemgetter)."""
        picked = self._pick(params)
        return picked if len(self.names) != 1 else (picked,)


def positional(sql: str) -> Positional:
    """``sql`` with each ``%(name)s`` replaced by ``$n`` (one number per name)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    converted = re.sub(r"%\((\w+)\)s", number, sql)
    if "%" in converted:
        raise ValueError(f"only %(name)s placeholders can be made positional: {sql}")
    return Positional(converted, tuple(names))


def step_statement(
    *, leased: bool, clear_control: bool, release: bool, events: int, attempts: bool = False
) -> Positional:
    """A step's run-row update and its events (``events``: how many; the count is a parameter), and with
    ``attempts`` (a step with events only) its tool attempts, as ONE statement (one round trip; in
    autocommit it is its own transaction): see :func:`with_events`."""
    return _step_statement(leased, clear_control, leased and release, events > 0, attempts and events > 0)


@functools.cache
def _step_statement(leased: bool, clear_control: bool, release: bool, events: bool, attempts: bool) -> Positional:
    head = step_update(leased=leased, clear_control=clear_control, release=release)
    return positional(with_events(head, events, attempts=attempts))


def prepare_steps() -> bytes:
    """``PREPARE`` of every step statement, sent once on each new connection (one round trip, simple
    protocol): a step then sends only its values (``store/_pg_direct.py``)."""
    variants = itertools.product((False, True), repeat=5)
    statements = {
        _step_statement(leased, clear, leased and release, events, attempts and events)
        for leased, clear, release, events, attempts in variants
    }
    return "; ".join(f"PREPARE {s.name.decode()} AS {s.sql}" for s in sorted(statements, key=lambda s: s.name)).encode()


@functools.cache
def create_statement(events: int) -> Positional:
    """A new run's row and its first ``events`` events as one statement: see :func:`with_events`."""
    return positional(with_events(CREATE_RUN, events))


def with_events(head: str, events: int, *, attempts: bool = False) -> str:
    """``head`` (a guarded write of the run row returning ``at``) and, if there are ``events``, the insert
    of them as one batch row (``store.base.event_batch``) in one statement: the batch is inserted only from
    the row ``head`` returned, so a refused write inserts nothing. Parameters: ``head``'s plus ``run_id``,
    ``new_seq`` (the batch's last event), ``count`` (its events), ``batch`` and ``lease_version``; with
    ``attempts``, also ``attempts`` (:func:`attempts_json`), upserted from that row too."""
    if not events:
        return head
    return (
        f"WITH moved AS ({head}){UPSERT_ATTEMPTS_FROM_MOVED if attempts else ''}"
        " INSERT INTO event_batches(run_id, seq, count, events, lease_version, at)"
        " SELECT %(run_id)s, %(new_seq)s, %(count)s, %(batch)s, %(lease_version)s, at FROM moved RETURNING at"
    )


# -- step contents ----------------------------------------------------------------------------------
# Each batch holds at least one event after the seq asked for: ``limit`` batches hold enough.
READ_BATCHES = """SELECT seq, count, events, lease_version, at FROM event_batches WHERE run_id=%s AND seq>%s
    ORDER BY seq LIMIT %s"""
READ_BATCHES_UPTO = """SELECT seq, count, events, lease_version, at FROM event_batches
    WHERE run_id=%s AND seq>%s AND seq-count<%s ORDER BY seq LIMIT %s"""
FORK_OF = "SELECT forked_from, fork_seq FROM runs WHERE run_id=%s"
CREATE_FORK = """INSERT INTO runs(run_id, tenant, agent, agent_version, status, terminal_reason, snapshot, parts,
        last_seq, forked_from, fork_seq, goal)
    VALUES (%(run_id)s, %(tenant)s, %(agent)s, %(agent_version)s, %(status)s, %(reason)s, %(snapshot)s, %(parts)s,
        %(new_seq)s, %(source)s, %(at_seq)s, %(goal)s)
    ON CONFLICT (run_id) DO NOTHING RETURNING created_at"""
INSERT_BATCH = """INSERT INTO event_batches(run_id, seq, count, events, lease_version, at)
    VALUES (%s,%s,%s,%s,0,%s)"""
FORKS_OF = """SELECT run_id FROM runs WHERE forked_from=%s ORDER BY created_at, run_id LIMIT %s"""
CHECKPOINT_AT = "SELECT seq, reason, snapshot, created_at, parts FROM checkpoints WHERE run_id=%s AND seq=%s"
CHECKPOINTS_OF = """SELECT seq, reason, snapshot, created_at, parts FROM checkpoints WHERE run_id=%s
    ORDER BY seq LIMIT %s"""
CLOSE_REQUEST = """UPDATE pending_requests SET answer=%s WHERE run_id=%s AND request_id=%s AND answer IS NULL
    RETURNING request_id"""  # a row read back, not a row count: what a pipeline reports
SET_AGENT_VERSION = "UPDATE runs SET agent_version=%s WHERE run_id=%s"
CLOSE_ALL_REQUESTS = "UPDATE pending_requests SET answer=%s WHERE run_id=%s AND answer IS NULL"
OPEN_REQUEST = """INSERT INTO pending_requests(run_id, request_id, body, answer, tenant, kind, approver_role, agent)
    VALUES (%s,%s,%s,NULL,%s,%s,%s,%s)"""
INSERT_ARTIFACT = """INSERT INTO artifacts(run_id, name, version, sha256, media_type, content, created_at)
    VALUES (%s,%s,%s,%s,%s,%s,%s)"""
UPSERT_ATTEMPT = """INSERT INTO tool_attempts(attempt_id, run_id, step, body) VALUES (%s,%s,%s,%s)
    ON CONFLICT (attempt_id) DO UPDATE SET run_id=EXCLUDED.run_id, step=EXCLUDED.step, body=EXCLUDED.body"""
# The same upsert inside a step's statement (``with_events``), from its rows as one JSON text parameter.
UPSERT_ATTEMPTS_FROM_MOVED = (
    ", tried AS (INSERT INTO tool_attempts(attempt_id, run_id, step, body)"
    " SELECT a.attempt_id, %(run_id)s, a.step, a.body"
    " FROM moved, json_to_recordset(%(attempts)s::json) AS a(attempt_id text, step bigint, body text)"
    " ON CONFLICT (attempt_id) DO UPDATE SET run_id=EXCLUDED.run_id, step=EXCLUDED.step, body=EXCLUDED.body)"
)


def attempts_json(rows: list[tuple[str, int, str]]) -> str:
    """(attempt id, step, body) rows as ``UPSERT_ATTEMPTS_FROM_MOVED`` reads them; an id written twice keeps
    its last body, as the upserts one after the other would (one statement may not touch a row twice)."""
    last = {attempt_id: (step, body) for attempt_id, step, body in rows}
    return json.dumps([{"attempt_id": k, "step": step, "body": body} for k, (step, body) in last.items()])


INSERT_CHECKPOINT = """INSERT INTO checkpoints(run_id, seq, reason, snapshot, parts, created_at)
    VALUES (%s,%s,%s,%s,%s,%s)"""
LATEST_CHECKPOINT = """SELECT seq, reason, snapshot, created_at, parts FROM checkpoints WHERE run_id=%s
    ORDER BY seq DESC LIMIT 1"""

# -- leases -----------------------------------------------------------------------------------------
# One statement each, so the check and the grant see the same row version (a concurrent grant makes
# PostgreSQL re-check the WHERE clause against the row it committed).
ACQUIRE_LEASE = f"""UPDATE runs SET lease_owner=%(owner)s, lease_version=lease_version+1,
        lease_expires_at={DB_EPOCH} + %(ttl)s
    WHERE run_id=%(run_id)s AND (lease_owner IS NULL OR lease_owner=%(owner)s
        OR lease_expires_at IS NULL OR lease_expires_at <= {DB_EPOCH})
    RETURNING lease_version, lease_expires_at"""
LEASE_ROW = "SELECT lease_owner, lease_version, lease_expires_at FROM runs WHERE run_id=%s"
# The claim of up to %(limit)s runs; RETURNING's order is the update's, so the caller sorts by queue order.
# A worker that names the versions it can build skips runs of those agents recorded under another
# version (a run of an agent it does not know is still claimed: its setback is recorded as before).
_BUILDABLE = """ AND NOT (agent = ANY(%(agents)s) AND agent_version IS NOT NULL
            AND (agent, agent_version) NOT IN (
                SELECT * FROM unnest(%(build_agents)s::text[], %(build_versions)s::text[])))"""


def claim_runs(filtered: bool) -> str:
    """The claim statement, with the version filter when the worker names what it can build."""
    return f"""WITH candidate AS (
        SELECT run_id FROM runs
        WHERE status = ANY(%(statuses)s) AND (lease_owner IS NULL OR lease_expires_at < {DB_EPOCH})
            AND (not_before IS NULL OR not_before <= {DB_EPOCH}){_BUILDABLE if filtered else ""}
        ORDER BY queued_at, run_id LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
    UPDATE runs SET lease_owner=%(owner)s, lease_version=runs.lease_version+1,
        lease_expires_at={DB_EPOCH} + %(ttl)s
    FROM candidate WHERE runs.run_id=candidate.run_id
    RETURNING runs.run_id, runs.lease_version, runs.lease_expires_at, runs.queued_at"""


CLAIM_RUNS = claim_runs(False)
CLAIM_BUILDABLE_RUNS = claim_runs(True)
DUE_RUNS = """SELECT run_id FROM runs WHERE status=%s AND not_before IS NOT NULL AND not_before <= %s
    ORDER BY not_before, run_id LIMIT %s"""
RENEW_LEASE = f"""UPDATE runs SET lease_expires_at={DB_EPOCH} + %s
    WHERE run_id=%s AND lease_owner=%s AND lease_version=%s RETURNING lease_expires_at"""
RELEASE_LEASE = """UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL, queued_at=now()
    WHERE run_id=%s AND lease_owner=%s AND lease_version=%s"""

# -- reads ------------------------------------------------------------------------------------------
GET_REQUEST = "SELECT body, answer FROM pending_requests WHERE run_id=%s AND request_id=%s"
LIST_REQUESTS = """SELECT run_id, body, answer FROM pending_requests
    WHERE (%(run_id)s::text IS NULL OR run_id=%(run_id)s) AND (NOT %(open_only)s OR answer IS NULL)
    ORDER BY run_id, request_id"""
ARTIFACT_COLUMNS = "name, version, sha256, media_type, content, created_at"
LIST_ARTIFACTS = f"SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE run_id=%s ORDER BY name, version"
GET_ARTIFACT = f"""SELECT {ARTIFACT_COLUMNS} FROM artifacts
    WHERE run_id=%(run_id)s AND name=%(name)s AND (%(version)s::bigint IS NULL OR version=%(version)s)
    ORDER BY version DESC LIMIT 1"""

# -- gateway state ----------------------------------------------------------------------------------
GET_BREAKER = "SELECT body FROM breakers WHERE tool=%s"
PUT_BREAKER = "INSERT INTO breakers(tool, body) VALUES (%s,%s) ON CONFLICT (tool) DO UPDATE SET body=EXCLUDED.body"
GET_SIDE_EFFECT = "SELECT body FROM side_effects WHERE idempotency_key=%s"
SIDE_EFFECTS_OF = """SELECT body FROM side_effects WHERE run_id=%s AND status = ANY(%s)
    ORDER BY idempotency_key"""
PUT_SIDE_EFFECT = """INSERT INTO side_effects(idempotency_key, run_id, tool, status, body, grant_id)
    VALUES (%s,%s,%s,%s,%s,%s)
    ON CONFLICT (idempotency_key) DO UPDATE
    SET run_id=EXCLUDED.run_id, tool=EXCLUDED.tool, status=EXCLUDED.status, body=EXCLUDED.body,
        grant_id=EXCLUDED.grant_id"""
