"""Arguments checked against a JSON Schema instead of a Python signature.

For tools a remote server describes (MCP): the schema is the server's, so the gateway validates with
``jsonschema`` and reports failures as a pydantic ``ValidationError`` — the input stage then returns
the same INVALID_ARGUMENT field errors (``loc``, ``msg``, ``type``) as for any typed tool, and a bad
call never reaches the server. Remote schemas cannot fetch anything: a ``$ref`` outside the document
is a validation failure, not a download.

``jsonschema`` (with ``referencing``, ``attrs`` and its format checkers, about 80 modules) is imported
when the first such schema is compiled, not with this module: a worker whose tools are all typed never
loads it.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Any

from pydantic import RootModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from stateward.core.errors import ErrorCode, UserError

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

MAX_FIELD_ERRORS = 20  # a pathological payload cannot make the refusal itself unbounded
_MAX_MESSAGE = 200


class JsonArgs(RootModel[dict[str, Any]]):
    """Validated arguments of a JSON-Schema tool: the JSON object exactly as sent."""


def compile_schema(tool: str, schema: dict[str, Any]) -> Validator:
    """A validator for ``schema`` (its ``$schema`` picks the draft; 2020-12 otherwise).

    Raises UserError INVALID_TOOL_SCHEMA when the schema is not a valid JSON Schema.
    """
    from jsonschema import exceptions as js_exceptions
    from jsonschema import validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except js_exceptions.SchemaError as exc:
        raise UserError(
            f"tool {tool!r}: invalid JSON Schema: {exc.message}", code=ErrorCode.INVALID_TOOL_SCHEMA
        ) from exc
    validator: Validator = cls(schema)
    return validator


def validate(tool: str, validator: Validator, args: dict[str, Any]) -> JsonArgs:
    """Return the arguments as JsonArgs, or raise pydantic.ValidationError with one entry per field error."""
    from referencing.exceptions import Unresolvable  # loaded with jsonschema by compile_schema

    try:
        found = list(islice(validator.iter_errors(args), MAX_FIELD_ERRORS))
    except Unresolvable as exc:
        unresolvable = [_detail((), "json_schema_ref", f"the schema has an unresolvable reference: {exc}", args)]
        raise ValidationError.from_exception_data(f"{tool}_args", unresolvable) from exc
    if not found:
        return JsonArgs(dict(args))
    details: list[InitErrorDetails] = []
    for err in sorted(found, key=lambda e: [str(p) for p in e.absolute_path]):
        path = tuple(err.absolute_path)
        if err.validator == "required" and isinstance(err.instance, dict):
            # one entry per missing property, located at the property (as pydantic's "missing")
            required = err.validator_value if isinstance(err.validator_value, list) else []
            missing = [p for p in required if p not in err.instance]
            details.extend(_detail((*path, str(p)), "missing", "Field required", err.instance) for p in missing)
        else:
            details.append(_detail(path, f"json_schema_{err.validator}", err.message, err.instance))
    raise ValidationError.from_exception_data(f"{tool}_args", _dedupe(details))


def _detail(loc: tuple[Any, ...], kind: str, message: str, value: Any) -> InitErrorDetails:
    text = message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "…"
    return InitErrorDetails(
        type=PydanticCustomError(kind, "{reason}", {"reason": text}),
        loc=tuple(p if isinstance(p, int) else str(p) for p in loc),
        input=value,
    )


def _dedupe(details: list[InitErrorDetails]) -> list[InitErrorDetails]:
    seen: set[tuple[Any, ...]] = set()
    out: list[InitErrorDetails] = []
    for d in details:
        kind = d["type"]
        key = (d["loc"], kind.type if isinstance(kind, PydanticCustomError) else kind)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
