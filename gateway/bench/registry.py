"""`gateway bench --registry`: the Schema Registry's request latency as a serializer feels it:
registering a new schema, and looking a schema up by id, beside a raw Redis round trip from the
same client (the floor every registry request stands on, since each reads `_schemas` to its end
first).

One client, one keep-alive HTTP connection, one request at a time: a serializer registers each of
its schemas once and a deserializer looks each new id up once, so what it waits for is latency, not
throughput. `--records` new Avro schemas (default 1,000), each under a subject of its own, then five
lookups per schema by a random id. Each row's records/s is requests per second; the CPU columns are
the gateway's and Redis's per request."""

from __future__ import annotations

import json
import random
import time

import aiohttp
import redis

from gateway.bench.common import (
    CpuSpan,
    Row,
    gateway_servers,
    percentile,
    raw_client,
    run_client,
    running_gateway,
)

SCHEMAS = 1_000
LOOKUPS_PER_SCHEMA = 5
HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _schema(i: int) -> str:
    """A record schema of a few fields, as applications register them, unique to `i`."""
    return json.dumps({"type": "record", "name": f"Order{i}", "namespace": "bench",
                       "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
                                  {"name": "amount", "type": "double"}, {"name": f"f{i}", "type": "int"}]})


def _row(what: str, size: int, latencies: list[float], span: CpuSpan | None, baseline: Row | None) -> Row:
    wall = sum(latencies)
    return Row(what, size, len(latencies) / wall if wall else 0.0,
               baseline.what if baseline else "", baseline.records_per_s if baseline else 0.0,
               p50_ms=percentile(latencies, 0.5) * 1e3, p99_ms=percentile(latencies, 0.99) * 1e3,
               cpu_us=span.per(len(latencies)) if span else {})


def _raw_round_trips(url: str, count: int) -> list[float]:
    r = raw_client(url)
    assert isinstance(r, redis.Redis)
    r.set("bench-registry-floor", b"x" * 64)
    out = []
    try:
        for _ in range(count):
            t = time.perf_counter()
            r.get("bench-registry-floor")
            out.append(time.perf_counter() - t)
    finally:
        r.delete("bench-registry-floor")
        r.close()
    return out


async def _requests(port: int, count: int, servers: CpuSpan, lookups: CpuSpan) -> tuple[list[float], list[float]]:
    base = f"http://127.0.0.1:{port}"
    registered: list[float] = []
    looked_up: list[float] = []
    ids: list[int] = []
    async with aiohttp.ClientSession(headers=HEADERS) as http:
        servers.start()
        for i in range(count):
            body = {"schema": _schema(i)}
            t = time.perf_counter()
            async with http.post(f"{base}/subjects/bench-{i}-value/versions", json=body) as resp:
                answer = await resp.json()
            registered.append(time.perf_counter() - t)
            if resp.status != 200:
                raise RuntimeError(f"the registry refused a schema: {resp.status} {answer}")
            ids.append(answer["id"])
        servers.stop()
        lookups.start()
        for _ in range(count * LOOKUPS_PER_SCHEMA):
            t = time.perf_counter()
            async with http.get(f"{base}/schemas/ids/{random.choice(ids)}") as resp:
                await resp.read()
            looked_up.append(time.perf_counter() - t)
            if resp.status != 200:
                raise RuntimeError(f"a registered id was not found: {resp.status}")
        lookups.stop()
    return registered, looked_up


def measure_registry(url: str, count: int) -> list[Row]:
    """Every row of `gateway bench --registry`."""
    floor = _row("raw redis: GET round trip", 64, _raw_round_trips(url, count * LOOKUPS_PER_SCHEMA), None, None)
    with running_gateway(url, registry=True) as gateway:
        servers = gateway_servers([gateway], url)
        register, lookup = CpuSpan(servers), CpuSpan(servers)
        registered, looked_up = run_client(_requests(gateway["registry"], count, register, lookup))
    size = len(_schema(count))
    return [floor, _row("registry: register a new schema", size, registered, register, floor),
            _row("registry: look a schema up by id", size, looked_up, lookup, floor)]
