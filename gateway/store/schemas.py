"""The Schema Registry's allocator: ids and versions handed out atomically across gateways.

The registry's records live in the `_schemas` topic; only the counters that must never hand the
same number to two gateways at once live here, in one hash-tag slot (`keys.SCHEMA_IDS`)."""

from __future__ import annotations

from gateway.errors import ErrorCode, InvalidRequest
from gateway.store import keys
from gateway.store.connection import storage_errors
from gateway.store.scripts import Scripts


class SchemaAllocStore:
    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts

    async def allocate(self, fingerprint: str, subject: str, known_id: int, known_version: int,
                       wanted_id: int = -1) -> tuple[int, int]:
        """(id, version): the schema's id (the same for the same fingerprint, whoever asks) and the
        subject's next version. `InvalidRequest` when `wanted_id` belongs to another schema."""
        async with storage_errors():
            reply = await self.scripts.call(
                "schema-allocate-2", [keys.SCHEMA_IDS, keys.SCHEMA_VERSIONS],
                [fingerprint, subject, known_id, known_version, wanted_id],
                # fingerprint, subject, known_id, known_version, wanted_id
            )
        if reply[0] != ErrorCode.OK:
            raise InvalidRequest(f"schema id {wanted_id} is taken by another schema (id {int(reply[1])})")
        return int(reply[1]), int(reply[2])

    async def forget(self, subject: str, fingerprints: list[str]) -> None:
        """The subject's versions, and its schemas' (`fingerprints`) there, are deleted for good."""
        async with storage_errors():
            await self.scripts.call("schema-forget-1", [keys.SCHEMA_VERSIONS],
                                    [subject, " ".join(fingerprints)])  # subject, fingerprints
