"""The local-directory object store: the embedded default (`./dev serve` tiers into `data/tier/`).

Each object is one file under the root, named by its key. A put writes a temporary file beside the
target, fsyncs it, renames it into place and fsyncs the directory, so a reader (or a gateway
restarted after a SIGKILL) sees the whole object or none of it; temporaries a crash leaves behind
are never listed and are swept by `list`. The blocking file calls run in a thread, since segments
are megabytes and the event loop serves every client.

The root is made once, when the store is opened. Afterwards a missing root is the store being
away (an unmounted volume, a deleted directory), not something to recreate: writing into the
empty mount point would hide the segments when the volume returns. It raises
`ObjectStoreUnavailable`, as does any other operating-system failure, so remote reads fail
retriably while local reads and produce carry on."""

from __future__ import annotations

import asyncio
import errno
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from gateway.store.objects import ObjectInfo, ObjectNotFound, ObjectStoreUnavailable

_TMP = ".tmp-"
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers one writev takes
T = TypeVar("T")


class LocalDirStore:
    """Objects as files under one directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ObjectStoreUnavailable(f"cannot create the tier directory {self.root}: {exc.strerror}") from exc

    @property
    def description(self) -> str:
        return f"directory {self.root}"

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in ("", ".", "..") or p.startswith(_TMP) for p in parts):
            raise ValueError(f"invalid object key {key!r}")
        return self.root.joinpath(*parts)

    async def _run(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(fn)
        except FileNotFoundError as exc:
            if not self.root.is_dir():
                raise ObjectStoreUnavailable(f"tier directory {self.root} is gone") from exc
            raise
        except (ObjectNotFound, ObjectStoreUnavailable, ValueError):
            raise
        except OSError as exc:
            raise ObjectStoreUnavailable(f"tier directory {self.root}: {exc.strerror or exc}") from exc

    async def put(self, key: str, *parts: bytes | memoryview) -> None:
        path = self._path(key)

        def write() -> None:
            if not self.root.is_dir():
                raise ObjectStoreUnavailable(f"tier directory {self.root} is gone")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f"{_TMP}{uuid.uuid4().hex}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    _write_all(fd, parts)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

        await self._run(write)

    async def get(self, key: str) -> bytes:
        path = self._path(key)

        def read() -> bytes:
            try:
                return path.read_bytes()
            except (FileNotFoundError, IsADirectoryError) as exc:
                self._check_root()
                raise ObjectNotFound(key) from exc

        return await self._run(read)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"invalid range {start}+{length} of {key!r}")
        path = self._path(key)

        def read() -> bytes:
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    return f.read(length)
            except (FileNotFoundError, IsADirectoryError) as exc:
                self._check_root()
                raise ObjectNotFound(key) from exc

        return await self._run(read)

    async def delete(self, key: str) -> None:
        path = self._path(key)

        def remove() -> None:
            self._check_root()
            path.unlink(missing_ok=True)
            parent = path.parent
            while parent != self.root:
                try:
                    parent.rmdir()
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                        return
                    raise
                parent = parent.parent

        await self._run(remove)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        def walk() -> list[ObjectInfo]:
            self._check_root()
            found: list[ObjectInfo] = []
            for dirpath, _dirs, files in os.walk(self.root):
                rel = Path(dirpath).relative_to(self.root)
                for name in files:
                    full = Path(dirpath) / name
                    if name.startswith(_TMP):
                        full.unlink(missing_ok=True)
                        continue
                    key = name if rel == Path(".") else f"{rel.as_posix()}/{name}"
                    if key.startswith(prefix):
                        try:
                            st = full.stat()
                        except FileNotFoundError:
                            continue
                        found.append(ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000))
            found.sort(key=lambda o: o.key)
            return found

        return await self._run(walk)

    async def close(self) -> None:
        return None

    def _check_root(self) -> None:
        if not self.root.is_dir():
            raise ObjectStoreUnavailable(f"tier directory {self.root} is gone")


def _write_all(fd: int, parts: tuple[bytes | memoryview, ...]) -> None:
    """`parts` written in order with `os.writev`, _IOV_MAX buffers a call: the kernel copies each
    straight from its buffer, where one joined object would cost the process a copy of the
    segment (and its freshly mapped pages) first. A short write goes on from where it stopped."""
    views = [memoryview(p) for p in parts if len(p)]
    at = 0
    while at < len(views):
        done = os.writev(fd, views[at: at + _IOV_MAX])
        if not done:
            raise OSError(errno.EIO, "writev wrote nothing")
        while done:
            if done >= len(views[at]):
                done -= len(views[at])
                at += 1
            else:
                views[at], done = views[at][done:], 0
