"""The README's "Compatibility" section held to what the suite proves: its table of Kafka APIs and
versions is what a running gateway and the real Kafka 4.4 broker list in ApiVersions, its clients are
the ones the named tests run at the versions `./dev lowest` and tests/jvm pin, and its tools are the
ones tests/test_kafka_tools.py runs. A claim there that no test proves fails here; a failure shows
what the section should say."""

from __future__ import annotations

import re
import tomllib
from itertools import takewhile
from pathlib import Path

import pytest
from packaging.version import Version

from gateway.kafka.dispatch import ApiKey
from tests.conftest import kafka_bootstrap
from tests.kafka_clients import CLIENTS
from tests.kafka_jvm import TOOLS
from tests.test_java_admin_methods import DIFFERENCES, README, api_versions, section_rows

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Compatibility"
# a client as the clients table names it -> what a test module that runs it contains: the import of
# its package, or tests/kafka_clients' CLIENTS (every Python client, one by one), or tests/jvm's
# programs
CLIENT_MARKERS = {
    "confluent-kafka": r"^import confluent_kafka|^from confluent_kafka|\bCLIENTS\b",
    "kafka-python": r"^import kafka\b|^from kafka\b|\bCLIENTS\b",
    "aiokafka": r"^import aiokafka|^from aiokafka|\bCLIENTS\b",
    "kafka-clients": r"\bgateway\.jvm\.",
}
# the Python package each Python client is installed as (CLIENTS' names are tests/kafka_clients')
PACKAGES = {"confluent": "confluent-kafka", "kafka-python": "kafka-python", "aiokafka": "aiokafka"}


def section() -> str:
    text = README.read_text()
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


CLIENTS_HEADER = "| Client | Versions | Run by |"


def clients() -> dict[str, list[str]]:
    """Client (its package's name, the first backticked word of its row) -> its row's cells."""
    lines = section().split(CLIENTS_HEADER, 1)[1].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in takewhile(
        lambda line: line.startswith("|"), lines)]
    return {re.findall(r"`([\w.-]+)`", row[0])[0]: row for row in rows}


def lowest(package: str) -> str:
    """The lowest version pyproject.toml allows, as constraints/lowest.txt pins it for `./dev lowest`."""
    pinned = dict(line.split("==") for line in (ROOT / "constraints" / "lowest.txt").read_text().split()
                  if "==" in line)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bounds = [d for ds in project["optional-dependencies"].values() for d in ds if d.startswith(package + ">=")]
    assert bounds and all(Version(b.split(">=")[1]) == Version(pinned[package]) for b in bounds), (
        package, bounds, pinned[package])
    return pinned[package]


def kafka_version() -> str:
    return re.findall(r"<kafka\.version>(.+)</kafka\.version>", (ROOT / "tests" / "jvm" / "pom.xml").read_text())[0]


def test_the_clients_are_those_the_named_tests_run_at_the_versions_pinned() -> None:
    lowest_run = re.search(r"^lowest\(\) \{.*?^\}", (ROOT / "dev").read_text(), re.M | re.S)
    assert lowest_run is not None
    claimed = re.findall(r"`(test_\w+\.py)`", section().split("with which `./dev lowest` runs", 1)[1].split(",", 1)[0])
    assert claimed and all(f"tests/{module}" in lowest_run.group() for module in claimed), claimed
    listed = clients()
    assert set(listed) == {*(PACKAGES[c] for c in CLIENTS), "kafka-clients"}, listed
    for client, (_, versions, tests) in listed.items():
        want = f"{kafka_version()}" if client == "kafka-clients" else f"{lowest(client)} and later"
        assert versions == want, f"{client}: the README says {versions!r}, the suite runs {want!r}"
        named = re.findall(r"`(test_\w+\.py)`", tests)
        assert named, client
        for module in named:
            source = (ROOT / "tests" / module).read_text()
            assert re.search(CLIENT_MARKERS[client], source, re.M), f"{module} does not run {client}"


def test_the_tools_are_those_the_tools_tests_run() -> None:
    line = next(p for p in section().split("\n\n") if p.startswith("**Kafka's command-line tools**"))
    listed = re.findall(r"`(kafka-[a-z-]+)`", line)
    assert listed == sorted(TOOLS), f"the README should list {sorted(TOOLS)}"
    assert kafka_version() in line
    ran = "".join(p.read_text() for p in (ROOT / "tests").glob("test_kafka_tools*.py"))
    assert [t for t in TOOLS if f'"{t}"' not in ran] == [], "tools the tools' tests never run"


def api_name(key: int, not_served: dict[int, str]) -> str:
    """Kafka's name of an API (ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpoch); keys the
    gateway has no name for are named by docs/kafka-differences.md's table of those it lacks."""
    if key in ApiKey._value2member_map_:
        return "".join(part.title() for part in ApiKey(key).name.split("_"))
    return not_served[key]


def api_table(gateway: dict[int, tuple[int, int]], kafka: dict[int, tuple[int, int]]) -> str:
    not_served = {int(k): api.strip() for keys, apis, _, _ in section_rows(
        DIFFERENCES.read_text(), "## API keys Kafka 4.4 serves that the gateway does not")
        for k, api in zip(keys.split(","), apis.split(","), strict=True)}
    def versions(served: tuple[int, int] | None) -> str:
        return "not served" if served is None else "-".join(dict.fromkeys(map(str, served)))

    rows = ["| API | Key | The gateway | Kafka 4.4 |", "| --- | --- | --- | --- |"]
    for key in sorted(set(gateway) | set(kafka)):
        rows.append(f"| {api_name(key, not_served)} | {key} | {versions(gateway.get(key))} | "
                    f"{versions(kafka.get(key))} |")
    return "\n".join(rows) + "\n"


@pytest.mark.jvm
@pytest.mark.kafka
async def test_the_api_table_is_what_a_gateway_and_kafka_list(gateway, kafka_broker) -> None:
    table = api_table(await api_versions(kafka_bootstrap(gateway)), await api_versions(kafka_broker.bootstrap))
    assert table in section(), f"README's table of APIs and versions should read:\n{table}"
