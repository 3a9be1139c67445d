"""A workload's history: one JSON object a line per operation event (process, type invoke|ok|fail|info,
f, value, time), written through and flushed per line so that a SIGKILLed client leaves every line it
finished readable; reading drops a torn last line.

`ok` means the operation happened, `fail` that it certainly did not, `info` that it may have (a timed-out
produce): the checker lets an `info` operation's effect appear or not, never a `fail`'s.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

Type = Literal["invoke", "ok", "fail", "info"]


@dataclass(frozen=True)
class Op:
    """One line of a history; `index` is its line number, the history's real-time order."""

    index: int
    process: int | str
    type: Type
    f: str
    value: Any
    time: float


class History:
    """The writer: thread-safe, since client callbacks run on other threads than the workload's loop."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, process: int | str, type: Type, f: str, value: Any = None) -> None:
        line = json.dumps({"process": process, "type": type, "f": f, "value": value, "time": time.time()})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def invoke(self, process: int | str, f: str, value: Any = None) -> None:
        self.write(process, "invoke", f, value)

    def ok(self, process: int | str, f: str, value: Any = None) -> None:
        self.write(process, "ok", f, value)

    def fail(self, process: int | str, f: str, value: Any = None) -> None:
        self.write(process, "fail", f, value)

    def info(self, process: int | str, f: str, value: Any = None) -> None:
        self.write(process, "info", f, value)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def read(path: Path) -> list[Op]:
    """Every complete line of `path` as an Op, in order."""
    ops: list[Op] = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            o = json.loads(line)
        except json.JSONDecodeError:  # the line a kill cut short
            continue
        ops.append(Op(i, o["process"], o["type"], o["f"], o["value"], o["time"]))
    return ops
