"""A payload codec for the Temporal tier (named ``tests.temporal.codecs:sealed``): each payload compressed and
its bytes reversed under an encoding of its own, so nothing of a run reads in clear in the cluster's history."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

SEALED = b"binary/stateward-test-sealed"


class Sealed(PayloadCodec):
    """Seals every payload; opens only its own."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": SEALED}, data=zlib.compress(p.SerializeToString())[::-1]) for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        opened = []
        for p in payloads:
            if p.metadata.get("encoding") != SEALED:
                opened.append(p)
                continue
            payload = Payload()
            payload.ParseFromString(zlib.decompress(p.data[::-1]))
            opened.append(payload)
        return opened


sealed = Sealed
not_a_codec = "sealed"
one_sealed = Sealed()
