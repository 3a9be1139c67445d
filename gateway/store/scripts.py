"""Loads `lua/`: resolves `--- @include "name"` lines, rejects cycles, checks each header.

The scripts ship inside the package (`gateway/store/lua` links to `lua/` at the top of the
repository) and are read through importlib.resources, so a wheel runs as a checkout does.

Scripts are registered once and called by SHA; redis-py reloads them on NOSCRIPT (after a Redis
restart or SCRIPT FLUSH), so callers never see that. On a Redis Cluster, EVALSHA goes to the node
of its first key, and a load goes to every primary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from gateway.store.connection import RedisClient, storage_error

LUA_DIR = files("gateway.store") / "lua"
_INCLUDE = re.compile(r'^--- @include "([\w-]+)"\s*$', re.M)
_NAME = re.compile(r"^([a-z0-9-]+)-(\d+)$")


class ScriptError(Exception):
    """A script in `lua/` is malformed; raised at load time, never at call time."""


def resolve(name: str, directory: Traversable = LUA_DIR, _stack: tuple[str, ...] = ()) -> str:
    """The text of `name`.lua with its includes pulled in, each once."""
    path = directory / f"{name}.lua" if not _stack else directory / "includes" / f"{name}.lua"
    if name in _stack:
        raise ScriptError(f"include cycle: {' -> '.join((*_stack, name))}")
    if not path.is_file():
        raise ScriptError(f"no script {path}")
    text = path.read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: resolve(m.group(1), directory, (*_stack, name)), text)


@dataclass(frozen=True)
class ScriptSpec:
    name: str
    numkeys: int
    keys: list[str]
    argv: list[str]
    source: str = field(repr=False)


_HEADER_KEY = re.compile(r"^\s*KEYS\[(\d+)\]\s+(\w+)", re.M)
_HEADER_ARG = re.compile(r"^\s*ARGV\[(\d+)\]\s+(\w+)", re.M)


def parse_spec(name: str, directory: Traversable = LUA_DIR) -> ScriptSpec:
    """Read the header of a script: which KEYS and ARGV it documents, and how many keys its name says."""
    m = _NAME.match(name)
    if not m:
        raise ScriptError(f"script name {name!r} must end in -<number of keys>")
    source = resolve(name, directory)
    header = source.split("]]", 1)[0]
    keys = [k for _, k in sorted((int(i), k) for i, k in _HEADER_KEY.findall(header))]
    argv = [a for _, a in sorted((int(i), a) for i, a in _HEADER_ARG.findall(header))]
    return ScriptSpec(name, int(m.group(2)), keys, argv, source)


def all_specs(directory: Traversable = LUA_DIR) -> dict[str, ScriptSpec]:
    names = sorted(p.name.removesuffix(".lua") for p in directory.iterdir() if p.name.endswith(".lua"))
    return {name: parse_spec(name, directory) for name in names}


class Scripts:
    """Every script of `lua/`, registered on one Redis client and callable by name."""

    def __init__(self, redis: RedisClient, directory: Traversable = LUA_DIR) -> None:
        self.specs = all_specs(directory)
        self._redis = redis
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(spec.source) for name, spec in self.specs.items()
        }

    def _check(self, name: str, keys: list[str], args: list[Any]) -> None:
        spec = self.specs[name]
        if len(keys) != spec.numkeys or len(args) != len(spec.argv):
            raise ScriptError(
                f"{name} takes {spec.numkeys} keys and ARGV {spec.argv}, got {len(keys)} keys, {len(args)} args"
            )

    def sha(self, name: str) -> str:
        return str(self._scripts[name].sha)

    def evalsha(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
        """The EVALSHA command of one call, for a pipeline of one's own."""
        self._check(name, keys, args)
        return ("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)

    async def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """One call; several go through `call_many` (one round trip, and the one way a cluster takes
        scripts in a pipeline)."""
        self._check(name, keys, args)
        return await self._scripts[name](keys=keys, args=args)

    async def call_many(self, calls: list[tuple[str, list[str], list[Any]]]) -> list[Any]:
        """Several calls in one round trip by SHA (one per node on a cluster); calls refused with
        NOSCRIPT (none ran) are loaded and sent again. Errors come back in place, as exceptions
        (a node away as `StorageUnavailable`, as a Cluster pipeline gives its calls on a node it lost;
        Redis out of memory as `StorageFull`), never as redis-py's own, which no face maps."""
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for attempt in range(2):
            pipe = self._redis.pipeline(transaction=False)
            for i in todo:
                # execute_command: a cluster pipeline refuses its evalsha() helper, not the command
                pipe.execute_command(*self.evalsha(*calls[i]))
            results = await pipe.execute(raise_on_error=False)
            missing = []
            for i, r in zip(todo, results, strict=True):
                replies[i] = storage_error(r) or r
                if isinstance(r, NoScriptError):
                    missing.append(i)
            if not missing or attempt:
                break
            for name in {calls[i][0] for i in missing}:
                await self._redis.script_load(self.specs[name].source)
            todo = missing
        return replies
