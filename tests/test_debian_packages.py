"""debian-packages.txt is the one list of Debian packages the project needs, and ./dev installs it:
every program the suite started (recorded by an audit hook in conftest.py) comes from a package on
that list, from a package every Debian has, or from the virtual environment itself. A
test that starts a program nothing installs fails here, rather than on the next fresh machine.

This test runs last (conftest.py orders it), so in a whole run it sees every program started."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import SPAWNED
from tests.test_readme import block

SHELL_BUILTINS = {"export", "set", "cd", "echo", ".", "source", "wait", "kill"}

ROOT = Path(__file__).resolve().parents[1]


def listed() -> dict[str, str]:
    """debian-packages.txt: package -> when ./dev installs it (serve or test)."""
    out = {}
    for line in (ROOT / "debian-packages.txt").read_text().splitlines():
        words = line.split()
        if words and not line.startswith("#"):
            out[words[0]] = words[1]
    return out


def owner(path: str) -> str | None:
    """The Debian package that installed `path` (or the file a link of it leads to), or None. With
    /bin merged into /usr/bin, a package may have installed the file under either name."""
    real = os.path.realpath(path)
    merged = [p.removeprefix("/usr") if p.startswith("/usr/") else "/usr" + p for p in (path, real)]
    for candidate in (path, real, *merged):
        done = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.split(":", 1)[0].split(",")[0].strip()
    return None


def in_every_debian(package: str) -> bool:
    """Essential or of priority required: debootstrap's smallest Debian has it."""
    done = subprocess.run(["dpkg-query", "-W", "-f=${Essential} ${Priority}", package],
                          capture_output=True, text=True)
    return done.stdout.split()[:1] == ["yes"] or done.stdout.split()[-1:] == ["required"]


def test_the_list_names_real_packages_for_serve_or_test():
    packages = listed()
    assert {"redis-server", "redis-sentinel"} <= packages.keys()
    assert set(packages.values()) <= {"serve", "test"}
    for package in packages:
        done = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True)
        assert done.returncode == 0, f"debian-packages.txt names {package}, which Debian does not have"


def shell_programs(script: str) -> set[str]:
    """The programs a shell script names as commands (a README block the tests run in bash, whose
    children the audit hook does not see): the first word of each command, assignments aside."""
    found = set()
    for line in script.splitlines():
        for command in re.split(r"\$\(|\||&&|;|&", line.split("#")[0]):
            words = [w for w in command.split() if not re.match(r"^\w+=", w)]
            if words and words[0].rstrip(")") not in SHELL_BUILTINS:
                found.add(words[0].rstrip(")"))
    return found


def test_every_program_the_suite_started_comes_from_a_listed_package(redis_server):
    assert SPAWNED, "the suite's own Redis at least was started"
    readme = shell_programs(block("GATEWAY_ADMIN_TOKEN="))  # the README's shell block that test_readme runs
    assert {"curl", "gateway"} <= readme
    ours = (Path(sys.prefix).resolve(), ROOT)
    search = os.pathsep.join([str(Path(sys.prefix) / "bin"), os.environ.get("PATH", "")])
    packages = listed()
    unlisted = {}
    for program in sorted(SPAWNED | readme):
        path = program if os.sep in program else shutil.which(program, path=search)
        assert path, f"the suite started {program!r}, which is on no PATH"
        if any(Path(path).resolve().is_relative_to(d) for d in ours):
            continue  # the virtual environment's own (pip installed it) or the repository's
        package = owner(path)
        if package is None or (package not in packages and not in_every_debian(package)):
            unlisted[path] = package
    assert not unlisted, f"started by the suite but installed by no package of debian-packages.txt: {unlisted}"
