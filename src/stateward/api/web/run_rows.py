"""The console's runs list rows, rendered in one pass in Python rather than a template loop.

A page lists up to a hundred runs; through Jinja2 each row cost a dozen filter calls and escapes, most
of the page's time. The markup is what ``console_runs.html`` made, every value escaped (``html.escape``, quotes too)
after anything a run or model wrote is made inert.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote

from markupsafe import Markup

from stateward.api.web.pages import CONSOLE_PREFIX
from stateward.api.web.times import ago, stamp
from stateward.core.inert import inert
from stateward.store.records import RunRow


def _time(at: datetime, now: datetime) -> str:
    return (
        f'<time datetime="{escape(at.isoformat(timespec="seconds"))}" title="{escape(stamp(at))}">'
        f"{escape(ago(at, now))}</time>"
    )


def run_rows(rows: Iterable[RunRow], now: datetime | None = None) -> Markup:
    """One ``<tr>`` per run: its link, status, agent and version, goal, why it ended, events and times."""
    now = now or datetime.now(UTC)
    out: list[str] = []
    for r in rows:
        run_id = escape(r.run_id)
        version = f' <span class="hint">v{escape(inert(r.agent_version, 40))}</span>' if r.agent_version else ""
        out.append(
            f'<tr data-testid="run-row" data-run-id="{run_id}">'
            f'<td><a href="{CONSOLE_PREFIX}/{escape(quote(r.run_id, safe=""))}"><code>{run_id}</code></a></td>'
            f'<td><span class="status s-{escape(r.status)}">{escape(r.status)}</span></td>'
            f"<td>{escape(inert(r.agent, 80))}{version}</td>"
            f'<td class="inert" data-testid="goal">{escape(inert(r.goal or "", 120))}</td>'
            f'<td class="inert">{escape(inert(r.terminal_reason or "", 120))}</td>'
            f"<td>{r.last_seq}</td><td>{_time(r.updated_at, now)}</td><td>{_time(r.created_at, now)}</td></tr>"
        )
    return Markup("\n".join(out))


__all__ = ["run_rows"]
