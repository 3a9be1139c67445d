"""compose.yaml stays valid and in step with the CLI, though no Docker engine runs it here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from gateway.cli import build_parser, serve_config
from gateway.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]


def serve_parser() -> argparse.ArgumentParser:
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def test_compose_runs_the_gateway_with_flags_the_cli_accepts():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    gw = compose["services"]["gateway"]
    environment = {name: str(value) for name, value in gw.get("environment", {}).items()}
    variables = {s.env for s in SETTINGS.values()}
    for name in environment:
        assert name in variables, f"{name} names no setting"
    # what the container runs with: its command's flags over its environment, read and checked as serve does
    config = serve_config(serve_parser().parse_args(gw["command"]), environment)
    assert config.redis_url == "redis://redis:6379/0"
    assert config.host == "0.0.0.0"
    published = {p.split(":")[1] for p in gw["ports"]}
    assert published == {str(config.kafka_port), str(config.native_port), str(config.admin_port),
                         str(config.schema_registry_port)}
    assert "redis" in gw["depends_on"]
    assert "--appendonly" in compose["services"]["redis"]["command"]


def test_dockerfile_builds_the_wheel_and_runs_gateway_serve_installed_from_it():
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["gateway", "serve"]' in text
    build, run = re.split(r"^FROM ", text, flags=re.M)[1:]
    copied = {src for line in build.splitlines() if line.startswith("COPY ") for src in line.split()[1:-1]}
    assert copied == {"gateway", "lua", "pyproject.toml", "setup.py", "README.md"}  # what the wheel is built from
    assert all((ROOT / path).exists() for path in copied)
    assert "pip wheel" in build and "COPY --from=build" in run and "pip install" in run
    assert "-e " not in text and "COPY gateway" not in run, "the image runs the installed wheel, not the sources"
