"""Whether telemetry may carry message and argument content, and how it is cut and redacted when it may.

Off by default: a span carries ids, sizes, hashes, codes and names. An operator opts in with the
GenAI convention's variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (or by passing
a policy); captured content is redacted (secret-looking fields and the caller's own rules) and bounded.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stateward.core.canonical import compact_json
from stateward.tools.redaction import RedactionRules

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# Field names whose values never leave the process, whatever the tool's own rules say.
SECRET_FIELDS = ("password", "secret", "token", "api_key", "apikey", "authorization", "credential", "private_key")


class ContentPolicy(BaseModel):
    """``capture``: whether spans carry content at all; ``max_chars``: the cut applied after redaction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    capture: bool = False
    max_chars: int = Field(default=4096, ge=64, le=1_000_000)
    redact: RedactionRules = RedactionRules(fields=SECRET_FIELDS)

    @classmethod
    def from_env(cls) -> ContentPolicy:
        """The policy the standard variable asks for (anything but ``true``/``1`` keeps content off)."""
        return cls(capture=os.environ.get(CAPTURE_ENV, "").strip().lower() in ("true", "1"))

    def render(self, value: Any, extra: RedactionRules | None = None) -> str | None:
        """The value as redacted, bounded JSON, or None when content is not captured."""
        if not self.capture:
            return None
        cleaned = self.redact.value(value)
        if extra is not None:
            cleaned = extra.value(cleaned)
        text = compact_json(cleaned)
        return text if len(text) <= self.max_chars else text[: self.max_chars] + "…[truncated]"
