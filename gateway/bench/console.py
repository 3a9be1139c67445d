"""`gateway bench --console`: how long each page of the web console takes to load in a browser,
against a gateway holding many topics and groups (1,000 and 100 by default), beside the same
page's admin-API requests timed raw from one HTTP client: the floor a page stands on, so the ratio
is what drawing it in a browser adds.

The topics are made with a Kafka admin client in batches, one record each in the groups' topics;
the groups are made through the admin API (an offset reset of no member, one per group, as
`kafka-consumer-groups --reset-offsets` makes one), each with a lag of one record. Each page is
then loaded `loads` times in headless chromium (Debian's, driven by playwright, as the console's
tests drive it), from a blank page until the page says it has drawn (`data-ready`); the requests
it made on its first load are the baseline, repeated `loads` times one after another. The CPU
columns are the gateway's and Redis's milliseconds per page load.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from statistics import median

from gateway.bench.common import CpuSpan, Progress, gateway_servers, run_client, running_gateway

TOPICS = 1_000
GROUPS = 100
LOADS = 20
BATCH = 100  # topics per CreateTopics request
CHROMIUM = "/usr/bin/chromium"


@dataclass
class PageRow:
    page: str
    loads: list[float]  # seconds per load in the browser
    api: list[float]  # seconds for the same page's admin-API requests, raw
    requests: int  # admin-API requests the page makes
    cpu_us: dict[str, float] = field(default_factory=dict)  # per load

    @property
    def ratio(self) -> float:
        return median(self.loads) / median(self.api) if self.api and median(self.api) else 0.0


def _pages(topic: str, group: str) -> list[tuple[str, str]]:
    return [("overview", "#/overview"), ("topics", "#/topics"), ("topic", f"#/topics/{topic}"),
            ("groups", "#/groups"), ("group", f"#/groups/{group}"), ("share groups", "#/share-groups"),
            ("transactions", "#/transactions"), ("delayed", f"#/delayed/{topic}"),
            ("watermarks", f"#/watermarks/{topic}"), ("users and ACLs", "#/security")]


def _populate(bootstrap: str, admin_port: int, topics: list[str], groups: list[str]) -> None:
    """`topics` made in batches, one record in each of the first len(groups), and each group
    committed at its topic's earliest offset (a lag of one)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), BATCH):
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics[i:i + BATCH]],
                                     request_timeout=120).values():
            f.result(120)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for t in topics[:len(groups)]:
        producer.produce(t, value=b"x" * 100)
    if producer.flush(60):
        raise RuntimeError("records not acknowledged in 60 s")
    for g, t in zip(groups, topics, strict=False):
        body = json.dumps({"topic": t, "to": "earliest"}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{admin_port}/admin/v2/groups/{g}/offsets", data=body,
                                     method="POST", headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).close()


async def _measure(admin_port: int, pages: list[tuple[str, str]], loads: int, span_of: CpuSpan) -> list[PageRow]:
    import aiohttp

    try:
        from playwright.async_api import async_playwright
    except ImportError:
        raise SystemExit("error: gateway bench --console needs playwright (pip install playwright) and "
                         f"Debian's chromium at {CHROMIUM}") from None
    base = f"http://127.0.0.1:{admin_port}"
    rows: list[PageRow] = []
    async with async_playwright() as pw, aiohttp.ClientSession() as http:
        browser = await pw.chromium.launch(executable_path=CHROMIUM)
        page = await browser.new_page()
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if "/admin/v2/" in r.url or r.url.endswith("/health")
                else None)
        for name, route in pages:
            span = CpuSpan(span_of.servers)
            took: list[float] = []
            span.start()
            for n in range(loads):
                await page.goto("about:blank")
                if n == 0:
                    asked.clear()
                began = time.perf_counter()
                await page.goto(f"{base}/console{route}")
                await page.wait_for_selector(f'[data-route="{route}"][data-ready]')
                took.append(time.perf_counter() - began)
                if n == 0:
                    wanted = list(asked)  # the first load's requests, before the page's timers add more
            span.stop()
            raw: list[float] = []
            for _ in range(loads):
                began = time.perf_counter()
                for url in wanted:
                    async with http.get(url) as resp:
                        await resp.read()
                raw.append(time.perf_counter() - began)
            rows.append(PageRow(name, took, raw, len(wanted), span.per(loads)))
            Progress.doing_else("")
        await browser.close()
    return rows


def measure_console(url: str, topics: int = TOPICS, groups: int = GROUPS, loads: int = LOADS) -> list[PageRow]:
    """Every row of `gateway bench --console`."""
    names = [f"bench-topic-{i:04d}" for i in range(topics)]
    group_ids = [f"bench-group-{i:03d}" for i in range(groups)]
    with running_gateway(url) as gateway:
        Progress.doing_else(f"making {topics} topics and {groups} groups")
        _populate(f"127.0.0.1:{gateway['kafka']}", gateway["admin"], names, group_ids)
        Progress.doing_else("")
        span = CpuSpan(gateway_servers([gateway], url))
        return run_client(_measure(gateway["admin"], _pages(names[0], group_ids[0]), loads, span))


def format_rows(rows: list[PageRow], topics: int, groups: int) -> str:
    """The table: per page its load time in the browser (median and max), the same requests raw,
    and the ratio; the servers' CPU per load."""
    head = (f"{'page':<15}{'loads':>6}{'median ms':>11}{'max ms':>9}{'api reqs':>9}{'api median ms':>15}"
            f"{'api max ms':>12}{'vs api':>8}{'gateway cpu ms':>16}{'redis cpu ms':>14}")
    lines = [f"console pages of a gateway holding {topics} topics and {groups} groups", head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.page:<15}{len(r.loads):>6}{median(r.loads) * 1e3:>11.1f}{max(r.loads) * 1e3:>9.1f}"
                     f"{r.requests:>9}{median(r.api) * 1e3:>15.1f}{max(r.api) * 1e3:>12.1f}{r.ratio:>7.1f}x"
                     f"{r.cpu_us.get('gateway', 0.0) / 1e3:>16.1f}{r.cpu_us.get('redis', 0.0) / 1e3:>14.1f}")
    return "\n".join(lines)
