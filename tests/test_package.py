"""The package installs: the wheel built from this checkout, installed into a fresh virtualenv outside
it, runs `gateway serve` (Lua scripts and all) for a real Kafka client, importing nothing from here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.kafka_clients import consume, produce

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "gateway", "lua")  # what the wheel is built from, as in the Dockerfile


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def outside_env() -> dict[str, str]:
    """This environment without what would let a process import from the checkout or set the gateway."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GATEWAY_")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel; its dependencies are this environment's, reached by a .pth
    file written after the install (so pip there never sees, nor replaces, this environment's gateway)."""
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:  # a copy, so the build leaves nothing in the checkout
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(ROOT / name, src / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("*.whl")
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel, cwd=tmp)
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp).strip())
    ours = dict.fromkeys(sysconfig.get_path(p) for p in ("purelib", "platlib"))
    (site / "test-dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    return venv


def test_the_installed_package_is_the_wheel_with_every_script(venv, tmp_path):
    code = ("import gateway; from gateway.store import scripts; from gateway.formats import compaction; "
            "print(gateway.__file__); print(scripts.LUA_DIR); print(len(scripts.all_specs())); "
            "print(compaction.ACCELERATED)")
    module, lua_dir, count, accelerated = run(
        venv / "bin" / "python", "-c", code, cwd=tmp_path, env=outside_env()).split()
    assert Path(module).is_relative_to(venv) and Path(lua_dir).is_relative_to(venv)
    assert int(count) == len(list((ROOT / "lua").glob("*.lua")))
    assert accelerated == "True"  # the wheel built the C walks of compacted topics (this machine has gcc)


async def test_gateway_serve_from_the_wheel_round_trips_records(venv, gateway_process, tmp_path):
    gateway_process.command = [str(venv / "bin" / "gateway")]
    gateway_process.env = outside_env()
    gateway_process.cwd = tmp_path
    gateway_process.start()
    messages = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    placed = await produce("confluent", gateway_process.kafka_bootstrap, "packaged", messages)
    assert [offset for _, offset in placed] == list(range(len(messages)))
    got = await consume("confluent", gateway_process.kafka_bootstrap, "packaged", 0, 0, len(messages))
    assert [(key, value) for _, _, key, value in got] == messages
    assert gateway_process.stop() == 0
