"""compose.yaml stays valid and in step with the CLI, though no Docker engine runs it here."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from gateway.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def serve_parser() -> argparse.ArgumentParser:
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def test_compose_runs_the_gateway_with_flags_the_cli_accepts():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    gw = compose["services"]["gateway"]
    args = serve_parser().parse_args(gw["command"])
    assert args.redis_url == "redis://redis:6379/0"
    assert args.host == "0.0.0.0"
    published = {p.split(":")[1] for p in gw["ports"]}
    assert published == {str(args.kafka_port), str(args.native_port), str(args.admin_port)}
    assert "redis" in gw["depends_on"]
    assert "--appendonly" in compose["services"]["redis"]["command"]
    for name in gw.get("environment", {}):
        field = name.removeprefix("GATEWAY_").lower()
        assert hasattr(args, field), f"{name} names no setting"


def test_dockerfile_starts_gateway_serve():
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["gateway", "serve"]' in text
    for path in ("gateway", "lua", "proto", "pyproject.toml"):
        assert path in text and (ROOT / path).exists()
