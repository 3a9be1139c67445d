"""Which object store a setting names: a directory path (or `file://` URL) for the local backend, an
`s3://bucket/prefix` URL for S3-compatible storage."""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlsplit

from gateway.store.objects import ObjectStore
from gateway.store.objects.local import LocalDirStore

S3_PARAMETERS = ("endpoint", "region", "path_style", "timeout", "attempts")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def open_object_store(location: str) -> ObjectStore:
    """The store at `location`; a `ValueError` naming the setting's accepted forms if it is neither."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return LocalDirStore(parts.path)
    if parts.scheme == "":
        return LocalDirStore(location)
    if parts.scheme == "s3":
        return _s3(location)
    raise ValueError(f"unsupported object store {location!r}: give a directory, a file:// URL or an s3:// URL")


def _s3(location: str) -> ObjectStore:
    """`s3://bucket/prefix?endpoint=URL&region=R&path_style=true&timeout=S&attempts=N`: the endpoint and
    region default to AWS_ENDPOINT_URL and AWS_REGION (or AWS_DEFAULT_REGION); the credentials come
    from botocore's usual chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, ~/.aws,
    an instance role), so a URL never carries a secret. Path-style addressing is the default when an
    endpoint is given (what MinIO, Ceph and most S3-compatible servers want), virtual-hosted on AWS."""
    from gateway.store.objects.s3 import S3Store  # botocore takes a while to import: only when asked

    parts = urlsplit(location)
    if parts.username or parts.password:
        raise ValueError("an s3:// URL takes no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - set(S3_PARAMETERS))
    if unknown:
        raise ValueError(f"unknown s3:// URL parameter {unknown[0]!r}: known are {', '.join(S3_PARAMETERS)}")
    endpoint = query.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = query.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    path_style = query.get("path_style", "true" if endpoint else "false").lower()
    if path_style not in _TRUE + _FALSE:
        raise ValueError(f"s3:// URL parameter path_style must be true or false, not {path_style!r}")
    try:
        timeout_s = float(query.get("timeout", "5"))
        attempts = int(query.get("attempts", "3"))
    except ValueError as exc:
        raise ValueError(f"s3:// URL parameters timeout (seconds) and attempts (a count) must be numbers: {exc}") from None
    if timeout_s <= 0 or attempts < 1:
        raise ValueError("s3:// URL parameters timeout must be above 0 and attempts at least 1")
    return S3Store(parts.netloc, parts.path, endpoint=endpoint, region=region, path_style=path_style in _TRUE,
                   timeout_s=timeout_s, attempts=attempts)
