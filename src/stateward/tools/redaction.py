"""Redaction of secrets from anything a tool hands back (results, error text, artifacts).

Whatever leaves the gateway may reach a model prompt, a trace or a person, so configured secrets are
removed at the boundary, before truncation (a cut must not leave half a secret that no longer matches).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

REDACTED = "[REDACTED]"


class RedactionRules(BaseModel):
    """``fields``: dict keys whose values are replaced wholesale (case-insensitive);
    ``patterns``: regexes replaced inside every string."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fields: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            re.compile(pattern)
        return value

    @cached_property
    def _compiled(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.patterns)

    @cached_property
    def _field_names(self) -> frozenset[str]:
        return frozenset(f.lower() for f in self.fields)

    @property
    def empty(self) -> bool:
        """True when nothing is redacted, so the gateway can skip the redaction pass."""
        return not self.fields and not self.patterns

    def text(self, value: str) -> str:
        """Apply the patterns to one string."""
        for pattern in self._compiled:
            value = pattern.sub(REDACTED, value)
        return value

    def value(self, value: Any) -> Any:
        """Redact a JSON-like value recursively: field names in dicts, patterns in strings."""
        if self.empty:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: REDACTED if str(k).lower() in self._field_names else self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def rules_from(redact: RedactionRules | list[str] | tuple[str, ...] | None) -> RedactionRules:
    """Accept a plain list: entries that look like a bare identifier are field names, the rest regexes."""
    if redact is None:
        return RedactionRules()
    if isinstance(redact, RedactionRules):
        return redact
    fields = tuple(r for r in redact if r.isidentifier())
    patterns = tuple(r for r in redact if not r.isidentifier())
    return RedactionRules(fields=fields, patterns=patterns)
