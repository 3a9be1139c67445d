"""Every method of Kafka 4.4's Admin interface, run against a real Kafka 4.4 broker and against the
gateway (tests/jvm/.../AdminMethods.java) and compared line by line; and every API key the broker
serves that the gateway does not, each with its decision. docs/kafka-differences.md is the one list
of what may differ; the README's table of Admin methods is checked against what this proves."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.conftest import kafka_bootstrap
from tests.kafka_differences import CLIENT_TELEMETRY, CLIENT_TELEMETRY_KEYS
from tests.kafka_jvm import java, unique
from tests.kafka_wire import call

pytestmark = [pytest.mark.jvm, pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
DIFFERENCES = ROOT / "docs" / "kafka-differences.md"
README = ROOT / "README.md"
# what the Java Admin client says of an API its node does not list in ApiVersions
NOT_SUPPORTED = "org.apache.kafka.common.errors.UnsupportedVersionException: The node does not support "
# short timeouts: a method Kafka answers slowly still ends in a few seconds, on both sides alike
OPTIONS = ["default.api.timeout.ms=10000", "request.timeout.ms=5000"]


def section_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table under `heading`, header and rule left out."""
    body = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def not_served() -> dict[int, str]:
    """API key -> its row's decision, from the differences' table of API keys the gateway lacks."""
    rows = section_rows(DIFFERENCES.read_text(), "## API keys Kafka 4.4 serves that the gateway does not")
    return {int(key): row[3] for row in rows for key in row[0].split(",")}


def not_served_methods() -> dict[str, set[str]]:
    """Admin method -> the APIs (as the Java client names them, DESCRIBE_LOG_DIRS) of its row there."""
    rows = section_rows(DIFFERENCES.read_text(), "## API keys Kafka 4.4 serves that the gateway does not")
    methods: dict[str, set[str]] = {}
    for _, apis, names, _ in rows:
        upper = {re.sub(r"(?<!^)(?=[A-Z])", "_", api.strip()).upper() for api in apis.split(",")}
        for name in re.findall(r"`(\w+)`", names):
            methods.setdefault(name, set()).update(upper)
    return methods


def other_differences() -> set[str]:
    """Admin methods the comparisons' allowlist names (`Admin.describeFeatures`) as answering otherwise."""
    rows = section_rows(DIFFERENCES.read_text(), "## What the comparisons with a real Kafka broker allow")
    return {name for row in rows for name in re.findall(r"`Admin\.([^`]+)`", row[0])}


def outcomes(lines: list[str]) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in lines)


# Kafka's suite broker and the gateway here have neither SASL nor a token secret; with both, the
# token methods work alike (tests/test_kafka_tools_tokens.py)
TOKEN_METHODS = {"createDelegationToken", "describeDelegationToken", "renewDelegationToken", "expireDelegationToken"}
TOKENS_SERVED = "with SASL and a token secret, works as on Kafka"


def readme_table(kafka: dict[str, str], gateway: dict[str, str], unserved: dict[str, set[str]]) -> str:
    """The README's table of Admin methods, from what the two runs answered."""
    rows = ["| Admin method | On the gateway |", "| --- | --- |"]
    for method, answer in kafka.items():
        if gateway[method] == answer:
            verdict = "works, as on Kafka" if answer.startswith("ok") else \
                f"fails as on Kafka (`{answer.split(':', 1)[0].rsplit('.', 1)[-1]}`)"
        elif method in unserved:
            api = gateway[method].removeprefix(NOT_SUPPORTED)
            verdict = f"answers like a Kafka broker without {api}: `UnsupportedVersionException`"
        else:
            verdict = "works; answers otherwise, as docs/kafka-differences.md says"
        if method in TOKEN_METHODS:
            verdict += f"; {TOKENS_SERVED}"
        rows.append(f"| `{method}` | {verdict} |")
    return "\n".join(rows) + "\n"


async def test_every_admin_method(gateway, kafka_broker):
    """Each method answers on the gateway what it answers on Kafka, or, for an API the gateway does
    not serve, what Kafka's client says of a broker without it; nothing else differs, and every
    difference the allowlist names is still there."""
    name = unique("methods")
    kafka = outcomes((await java("gateway.jvm.AdminMethods", kafka_broker.bootstrap, name, *OPTIONS)).lines())
    on_gateway = outcomes((await java("gateway.jvm.AdminMethods", kafka_bootstrap(gateway), name, *OPTIONS)).lines())
    assert list(on_gateway) == list(kafka)
    assert not [m for m, answer in kafka.items() if answer == "not called"]

    unserved, others = not_served_methods(), other_differences()
    differ = {m for m in kafka if on_gateway[m] != kafka[m]}

    def explained(method: str) -> bool:
        if method in unserved:
            return on_gateway[method] in {NOT_SUPPORTED + api for api in unserved[method]}
        return method in others

    unexplained = {m: (kafka[m], on_gateway[m]) for m in sorted(differ) if not explained(m)}
    assert not unexplained, f"differences docs/kafka-differences.md does not list: {unexplained}"
    assert (set(unserved) | others) <= differ, f"listed but answered alike: {(set(unserved) | others) - differ}"

    table = readme_table(kafka, on_gateway, unserved)
    assert table in README.read_text(), f"README's table of Admin methods should read:\n{table}"


async def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, port = bootstrap.rsplit(":", 1)
    conn = await asyncio.open_connection(host, int(port))
    try:
        answer = await call(conn, 18, 0)
    finally:
        conn[1].close()
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


async def test_api_keys_kafka_serves_and_the_gateway_lacks(gateway, kafka_broker):
    """Every API key Kafka lists that the gateway does not has its written decision, the list names
    no key the gateway serves, and the gateway lists nothing Kafka does not but the telemetry APIs."""
    kafka = await api_versions(kafka_broker.bootstrap)
    on_gateway = await api_versions(kafka_bootstrap(gateway))
    assert set(on_gateway) - set(kafka) == CLIENT_TELEMETRY_KEYS, CLIENT_TELEMETRY.reason
    assert sorted(set(kafka) - set(on_gateway)) == sorted(not_served())
