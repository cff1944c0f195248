"""Helpers every controller shares (the contract itself lives in ``stateward.core.contract``)."""

from __future__ import annotations

from stateward.core.contract import SignalFailure
from stateward.core.model_io import ModelReply


def provider_rejection(reply: ModelReply) -> SignalFailure | None:
    """A reply the provider already knows is not one decision (two tool calls, cut off, thinking only)."""
    if reply.rejection_code is None:
        return None
    return SignalFailure(code=reply.rejection_code, message=reply.rejection_message or "", raw=reply.text[:2000])
