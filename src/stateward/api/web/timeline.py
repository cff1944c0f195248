"""A run's timeline rows, rendered in one pass in Python rather than a template loop.

A console page shows up to a page of events, each a line and its payload behind a disclosure; through
Jinja2 every row cost several filter calls and escapes, and the timeline was most of the page's time.
The markup is the one ``_event_lines.html`` made, every value escaped (``html.escape``, quotes too)
after it is made inert, so model and tool text shows as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape

from markupsafe import Markup

from stateward.api.web.readable import event_line
from stateward.api.web.times import stamp
from stateward.core.events import Event
from stateward.core.inert import inert

PAYLOAD_CHARS = 6000


def payload_text(payload: object, max_chars: int = PAYLOAD_CHARS) -> str:
    """The payload pretty-printed, each line made inert, cut at ``max_chars`` with a visible note."""
    return inert_lines(json.dumps(payload, ensure_ascii=False, indent=2, sort_keys=True, default=str), max_chars)


def inert_lines(text: str, max_chars: int = 4000) -> str:
    """Our own line breaks kept (a pretty-printed document), every line's content made inert."""
    out: list[str] = []
    budget = max_chars
    for line in text.split("\n"):
        if budget <= 0:
            out.append("…[more lines not shown]")
            break
        shown = inert(line, budget)
        out.append(shown)
        budget -= len(shown)
    return "\n".join(out)


def timeline_rows(events: Iterable[Event]) -> Markup:
    """One ``<li>`` per event: its time, its readable line, its payload behind ``<details>``."""
    rows = [
        '<li data-testid="event" data-type="{t}"><details><summary><time datetime="{iso}" title="{title}">'
        '{hms}</time> <span class="inert">{line}</span></summary><pre class="inert">{body}</pre></details></li>'.format(
            t=escape(e.type.value),
            iso=escape(e.at.isoformat(timespec="seconds")),
            title=escape(stamp(e.at)),
            hms=e.at.strftime("%H:%M:%S"),
            line=escape(event_line(e)),
            body=escape(payload_text(e.payload)),
        )
        for e in events
    ]
    return Markup("".join(rows))


__all__ = ["PAYLOAD_CHARS", "inert_lines", "payload_text", "timeline_rows"]
