"""Times as people read them on the inbox's and console's pages: relative (``3 min ago``) with the exact
UTC time to the second beside it, never raw ISO with microseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def ago(at: datetime, now: datetime | None = None) -> str:
    """``at`` relative to now, coarsely (``3 min ago``, ``in 2 h``)."""
    now = now or datetime.now(UTC)
    seconds = int((now - at).total_seconds())
    future, seconds = seconds < 0, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            text = f"{seconds // size} {unit}"
            break
    else:
        text = f"{seconds} s"
    return f"in {text}" if future else f"{text} ago"


def stamp(at: datetime) -> str:
    """A UTC time to the second, no microseconds (the page's script-free local time is this, labelled)."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


__all__ = ["ago", "stamp"]
