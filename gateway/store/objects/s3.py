"""The S3-compatible object store (AWS S3, MinIO, Ceph, R2, GCS's S3 API), through aiobotocore.

Why aiobotocore rather than obstore (Rust's object_store): both moved the same bytes here (s3s-fs on
loopback, 16 MB PUTs about 110-160 MB/s, 1 MB ranged GETs about 50-60 MB/s with either), but
obstore 0.12.1 aborted the interpreter at exit (SIGABRT, exit code 134) in about two runs of three
after a request had failed to connect: its Tokio threads outlive Python's finalisation. A gateway
whose store went away must still exit cleanly, and so must the test run that checks it. aiobotocore
is pure Python on aiohttp, which the gateway already uses, and is botocore's own signing and retry
logic, kept by the AWS SDK's users.

Segments are tens of megabytes at most, far below S3's 5 GB single-PUT limit, so every put is one
PUT: the object appears whole or not at all, and no multipart upload is ever left half done.

A store that is away must fail a remote read promptly and retriably, never hang a Fetch: each
request has a connect and a read timeout (a server that accepts but never answers is a read
timeout) and a bounded number of attempts, and every failure that is not "no such key" becomes
`ObjectStoreUnavailable`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiobotocore.session import get_session
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from gateway.store.objects import ObjectInfo, ObjectNotFound, ObjectStoreUnavailable

T = TypeVar("T")

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}


def check_key(key: str) -> None:
    """A relative `/`-separated name with no empty, `.` or `..` part: the same keys a directory allows."""
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
        raise ValueError(f"invalid object key {key!r}")


class S3Store:
    """Objects under `prefix` in one bucket. The client is made on first use (opening is synchronous,
    at start-up) and holds a pool of connections until `close`.

    `endpoint` is None for AWS itself; `path_style` addresses the bucket in the path, as most
    S3-compatible servers want. Credentials left None come from botocore's usual chain (the AWS_*
    variables, ~/.aws, an instance role). `timeout_s` bounds the connect and each read of one
    attempt, `attempts` the tries of one call; `list_page_size` is the keys asked per listing page."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint: str | None = None, region: str = "us-east-1",
                 path_style: bool = True, access_key_id: str | None = None, secret_access_key: str | None = None,
                 session_token: str | None = None, timeout_s: float = 5.0, attempts: int = 3,
                 list_page_size: int = 1000) -> None:
        if not bucket:
            raise ValueError("an S3 store needs a bucket")
        if prefix:
            check_key(prefix.strip("/"))
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint = endpoint
        self.region = region
        self.list_page_size = list_page_size
        options: dict[str, Any] = {
            "connect_timeout": timeout_s, "read_timeout": timeout_s,
            "retries": {"max_attempts": attempts, "mode": "standard"},
            "s3": {"addressing_style": "path" if path_style else "virtual"},
        }
        # botocore 1.36+ adds CRC checksums to every PUT by default, which some S3-compatible servers refuse
        if "request_checksum_calculation" in BotoConfig.OPTION_DEFAULTS:
            options |= {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
        self._client_args: dict[str, Any] = {
            "region_name": region, "endpoint_url": endpoint, "config": BotoConfig(**options),
            "aws_access_key_id": access_key_id, "aws_secret_access_key": secret_access_key,
            "aws_session_token": session_token,
        }
        self._client: Any = None
        self._exit: contextlib.AsyncExitStack | None = None
        self._opening = asyncio.Lock()

    @property
    def description(self) -> str:
        where = self.endpoint or f"AWS {self.region}"
        return f"s3://{self.bucket}/{self.prefix} at {where}"

    async def _s3(self) -> Any:
        async with self._opening:
            if self._client is None:
                stack = contextlib.AsyncExitStack()
                self._client = await stack.enter_async_context(get_session().create_client("s3", **self._client_args))
                self._exit = stack
        return self._client

    async def _call(self, key: str, op: Callable[[Any], Awaitable[T]]) -> T:
        """`op` on the client, its failures as the Protocol's two errors."""
        try:
            return await op(await self._s3())
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") in _NOT_FOUND:
                raise ObjectNotFound(key) from exc
            raise ObjectStoreUnavailable(f"{self.description}: {error.get('Code')} {error.get('Message', '')}".rstrip()) from exc
        except (TimeoutError, BotoCoreError, aiohttp.ClientError, OSError) as exc:
            raise ObjectStoreUnavailable(f"{self.description}: {exc}") from exc

    async def put(self, key: str, *parts: bytes | memoryview) -> None:
        check_key(key)
        data = parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)  # one signed body
        await self._call(key, lambda s3: s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data))

    async def get(self, key: str) -> bytes:
        check_key(key)

        async def read(s3: Any) -> bytes:
            response = await s3.get_object(Bucket=self.bucket, Key=self.prefix + key)
            async with response["Body"] as body:
                data: bytes = await body.read()
            return data

        return await self._call(key, read)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"invalid range {start}+{length} of {key!r}")
        check_key(key)

        async def read(s3: Any) -> bytes:
            if length:
                try:
                    response = await s3.get_object(Bucket=self.bucket, Key=self.prefix + key,
                                                   Range=f"bytes={start}-{start + length - 1}")
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") != "InvalidRange":
                        raise
                else:
                    async with response["Body"] as body:
                        data: bytes = await body.read()
                    return data
            # nothing asked, or a start at or past the end (S3 answers 416): empty, if the object is there
            await s3.head_object(Bucket=self.bucket, Key=self.prefix + key)
            return b""

        return await self._call(key, read)

    async def delete(self, key: str) -> None:
        check_key(key)
        await self._call(key, lambda s3: s3.delete_object(Bucket=self.bucket, Key=self.prefix + key))

    async def list(self, prefix: str) -> list[ObjectInfo]:
        async def pages(s3: Any) -> list[ObjectInfo]:
            found = []
            async for page in _pages(s3, self.bucket, self.prefix + prefix, self.list_page_size):
                for obj in page.get("Contents", ()):
                    found.append(ObjectInfo(obj["Key"][len(self.prefix):], obj["Size"],
                                            int(obj["LastModified"].timestamp() * 1000)))
            found.sort(key=lambda o: o.key)
            return found

        return await self._call(prefix, pages)

    async def close(self) -> None:
        if self._exit is not None:
            await self._exit.aclose()
        self._client, self._exit = None, None


async def _pages(s3: Any, bucket: str, prefix: str, page_size: int) -> AsyncIterator[dict[str, Any]]:
    """ListObjectsV2 page by page, following continuation tokens."""
    async for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": page_size}):
        yield page
