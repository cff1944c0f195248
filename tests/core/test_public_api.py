"""The public API is one deliberate list, and every name on it resolves."""

from __future__ import annotations

import stateward


def test_all_is_sorted_and_matches_the_lazy_exports() -> None:
    assert list(stateward.__all__) == sorted(stateward.__all__)
    assert set(stateward.__all__) == set(stateward._EXPORTS)


def test_every_public_name_resolves() -> None:
    for name in stateward.__all__:
        assert getattr(stateward, name) is not None
