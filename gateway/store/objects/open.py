"""Which object store a setting names: a directory path (or `file://` URL) for the local backend."""

from __future__ import annotations

from urllib.parse import urlsplit

from gateway.store.objects import ObjectStore
from gateway.store.objects.local import LocalDirStore


def open_object_store(location: str) -> ObjectStore:
    """The store at `location`; a `ValueError` naming the setting's accepted forms if it is neither."""
    scheme = urlsplit(location).scheme
    if scheme == "file":
        return LocalDirStore(urlsplit(location).path)
    if scheme == "":
        return LocalDirStore(location)
    raise ValueError(f"unsupported object store {location!r}: give a directory or a file:// URL")
