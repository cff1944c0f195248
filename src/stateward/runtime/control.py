"""A pause or cancel request left for a run's lease holder, and who asked for it.

The holder honours it at its next step boundary, possibly in another process, possibly much later; the
principal who asked travels with the request (in the run row's ``control`` column, as JSON) so that the
transition the holder records names them, not "operator". Plain ``"pause"`` / ``"cancel"`` values written
by earlier versions still read, as asked by ``operator``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

ControlKind = Literal["pause", "cancel"]
UNKNOWN_ASKER = "operator"


@dataclass(frozen=True)
class ControlRequest:
    """``kind`` asked by ``by`` (the principal's subject as the service or the CLI recorded it), holding
    ``roles`` (the service's principals; empty from the CLI)."""

    kind: ControlKind
    by: str = UNKNOWN_ASKER
    roles: tuple[str, ...] = ()

    def encode(self) -> str:
        return json.dumps({"kind": self.kind, "by": self.by, "roles": sorted(self.roles)}, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | None) -> ControlRequest | None:
        """The stored request, or None for none (or for a value nobody here wrote)."""
        if raw is None:
            return None
        if raw in ("pause", "cancel"):
            return cls(kind=raw)  # type: ignore[arg-type]
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("kind") not in ("pause", "cancel"):
            return None
        by, roles = data.get("by"), data.get("roles")
        return cls(
            kind=data["kind"],
            by=by if isinstance(by, str) and by else UNKNOWN_ASKER,
            roles=tuple(r for r in roles if isinstance(r, str)) if isinstance(roles, list) else (),
        )
