"""Object storage for tiered segments: the one interface every backend (a local directory, S3-compatible
stores) implements, so the tiering code never knows which it talks to.

The interface is the least a log's cold tail needs from a store: whole objects written once and never
changed (a segment is immutable once copied), ranged reads (a Fetch takes a slice of a segment, never
the whole), deletes of objects that may already be gone (retention and orphan clean-up race each
other harmlessly), and listing by prefix (finding orphans an interrupted copy left behind). An object
store that cannot be reached raises `ObjectStoreUnavailable`, which callers turn into a retriable
error for remote reads while local reads and produce carry on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ObjectStoreUnavailable(Exception):
    """The object store could not be reached or answered with a server error; retry later."""


class ObjectNotFound(Exception):
    """The object asked for does not exist (deleted by retention, or never written)."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object: its key, its size in bytes, and when it was last written (ms since epoch)."""

    key: str
    size: int
    modified_ms: int


class ObjectStore(Protocol):
    """A bucket (or directory) of immutable objects under one key prefix of the gateway's choosing.

    Keys are `/`-separated relative names; the backend maps them under its own root or prefix."""

    @property
    def description(self) -> str:
        """Where the objects live, for logs and the admin API (never includes credentials)."""
        ...

    async def put(self, key: str, *parts: bytes | memoryview) -> None:
        """Write `parts`, one after another, as `key` whole and durably; a reader never sees half an
        object. A segment comes as its batches' own buffers, never joined into one copy first."""
        ...

    async def get(self, key: str) -> bytes:
        """The whole object; `ObjectNotFound` if it is absent."""
        ...

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer only at the object's end); `ObjectNotFound` if absent."""
        ...

    async def delete(self, key: str) -> None:
        """Remove `key`; an absent key is not an error (deletes race retention harmlessly)."""
        ...

    async def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, in key order."""
        ...

    async def close(self) -> None:
        """Release connections and files."""
        ...
