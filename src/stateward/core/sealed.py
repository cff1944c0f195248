"""A sealed document: a JSON object serialized once, that nothing can change afterwards.

A controller's memo can hold large values that stay the same for many steps (a plan, the record of a
finished work item). Stored as plain data, each step would serialize them again only for the store to
find they did not change. A :class:`Sealed` holds the JSON text made once, when its content was made;
a store writes that text as it is and tells an unchanged document by its identity or its text, without
serializing or hashing it again (store/parts.py). Its digest (SHA-256 of the text, naming it where it
is stored apart) is computed the first time it is asked for.

It reads like the JSON object it holds (a read-only ``Mapping``), and ``RunState.model_dump()`` /
``model_dump_json()`` give the plain object, so a reader never needs to know. Immutable for real: the
text is the only content, and every read parses it afresh, so changing what a read returned changes
nothing stored and can never make a store write a stale document. A new content is a new ``Sealed``.
"""

from __future__ import annotations

import json
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaSerializer, core_schema, to_json

from stateward.core.canonical import sha256_hex
from stateward.core.errors import ErrorCode, UserError

__all__ = ["Sealed"]


class Sealed(Mapping[str, Any]):
    """A JSON object as text made once: equal to the plain object it holds, cheap to compare and store."""

    __slots__ = ("_digest", "_text")

    _text: str
    _digest: str | None

    def __new__(cls, value: BaseModel | Mapping[str, Any]) -> Sealed:
        """Seal a pydantic model (its JSON as ``model_dump_json()`` gives it) or a mapping of JSON-able data."""
        if isinstance(value, Sealed):
            return value
        if isinstance(value, BaseModel):
            text = value.__pydantic_serializer__.to_json(value).decode()
        elif isinstance(value, Mapping):
            text = to_json(value if isinstance(value, dict) else dict(value)).decode()
        else:
            text = ""
        if not text.startswith("{"):  # a model may serialize itself as something else
            raise UserError(
                f"only a JSON object can be sealed, not {type(value).__name__}", code=ErrorCode.NOT_AN_OBJECT
            )
        return cls._of_text(text)

    @classmethod
    def _of_text(cls, text: str) -> Sealed:
        """Only for text our own serializer made (or a pickle of it): it is spliced into stored JSON as is."""
        sealed = object.__new__(cls)
        object.__setattr__(sealed, "_text", text)
        object.__setattr__(sealed, "_digest", None)
        return sealed

    @property
    def text(self) -> str:
        """The JSON text, exactly as stores write it."""
        return self._text

    @property
    def digest(self) -> str:
        """SHA-256 of the text (hex), computed once when first asked for."""
        if self._digest is None:
            object.__setattr__(self, "_digest", sha256_hex(self._text))
        assert self._digest is not None
        return self._digest

    @property
    def value(self) -> dict[str, Any]:
        """The plain object, parsed afresh: the caller owns it, and changing it changes nothing here."""
        parsed: dict[str, Any] = json.loads(self._text)
        return parsed

    def same_text(self, other: Sealed) -> bool:
        """Whether ``other`` holds exactly this text (identity first: the usual case is the same document)."""
        return other is self or other._text == self._text

    # -- a read-only mapping over the value --------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.value[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.value)

    def __len__(self) -> int:
        return len(self.value)

    def __contains__(self, key: object) -> bool:
        return key in self.value

    # One parse for a whole walk (the Mapping defaults would parse once per key).
    def keys(self) -> KeysView[str]:
        return self.value.keys()

    def items(self) -> ItemsView[str, Any]:
        return self.value.items()

    def values(self) -> ValuesView[Any]:
        return self.value.values()

    def get(self, key: str, default: Any = None) -> Any:
        return self.value.get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sealed):
            return self.same_text(other) or self.value == other.value
        if isinstance(other, Mapping):
            return self.value == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, which are not hashable either

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Sealed document cannot be changed ({name})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Sealed document cannot be changed ({name})")

    def __copy__(self) -> Sealed:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Sealed:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Sealed._of_text, (self._text,))

    def __repr__(self) -> str:
        shown = self._text if len(self._text) <= 80 else f"{self._text[:77]}..."
        return f"Sealed({shown})"


def _plain(sealed: Sealed) -> dict[str, Any]:
    return sealed.value


# pydantic serializes a value typed ``Any`` (a memo entry) through the serializer its class carries:
# model_dump() and model_dump_json() give the plain object.
Sealed.__pydantic_serializer__ = SchemaSerializer(  # type: ignore[attr-defined]
    core_schema.any_schema(serialization=core_schema.plain_serializer_function_ser_schema(_plain))
)
