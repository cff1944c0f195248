"""Building a Model from a ``provider:name`` spec, as the CLI's ``--model`` and agent params carry it."""

from __future__ import annotations

from stateward.core.errors import UserError
from stateward.models.base import Model

PROVIDERS = ("openai", "anthropic")


def model_from_spec(spec: str) -> Model:
    provider, sep, name = spec.partition(":")
    if not sep or not name or provider not in PROVIDERS:
        raise UserError(f"model spec {spec!r} is not 'openai:<name>' or 'anthropic:<name>'", code="INVALID_MODEL_SPEC")
    raise UserError(f"the {provider} provider is not available in this build", code="MODEL_PROVIDER_UNAVAILABLE")
