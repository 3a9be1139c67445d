"""The Schema Registry's REST API as Confluent's registry answers it: routes, bodies, error codes.

The cases are Confluent's API reference's (docs.confluent.io, schema-registry/develop/api) and
Karapace's `tests/integration/test_schema.py` ones that name an error code."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.server.gateway import Gateway
from gateway.store.embedded import free_port
from tests.conftest import running_gateway, test_config

RECORD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}


def avro(schema: Any) -> dict[str, Any]:
    return {"schema": json.dumps(schema)}


def registry_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.listeners['schema_registry'].port}"


class Registry:
    """A plain HTTP client of one gateway's registry: (status, body) of each call."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, self.url + path, json=body) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.call("GET", path)

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def put(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body)

    async def delete(self, path: str) -> tuple[int, Any]:
        return await self.call("DELETE", path)


@pytest.fixture
async def registry_gateway(redis_url: str) -> AsyncIterator[Gateway]:
    async with running_gateway(test_config(redis_url, schema_registry_port=free_port())) as gw:
        yield gw


@pytest.fixture
async def sr(registry_gateway: Gateway) -> AsyncIterator[Registry]:
    async with aiohttp.ClientSession() as session:
        yield Registry(session, registry_url(registry_gateway))


async def test_register_and_read_back(sr: Registry) -> None:
    assert await sr.get("/subjects") == (200, [])
    assert await sr.get("/schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"])
    status, body = await sr.post("/subjects/users-value/versions", avro(RECORD))
    assert status == 200 and set(body) == {"id"}
    schema_id = body["id"]
    assert await sr.post("/subjects/users-value/versions", avro(RECORD)) == (200, {"id": schema_id})
    assert await sr.get("/subjects") == (200, ["users-value"])
    assert await sr.get("/subjects/users-value/versions") == (200, [1])
    text = json.dumps(RECORD, separators=(",", ":"))
    want = {"subject": "users-value", "version": 1, "id": schema_id, "schema": text}
    assert await sr.get("/subjects/users-value/versions/1") == (200, want)
    assert await sr.get("/subjects/users-value/versions/latest") == (200, want)
    assert await sr.get("/subjects/users-value/versions/1/schema") == (200, RECORD)
    assert await sr.get(f"/schemas/ids/{schema_id}") == (200, {"schema": text})
    assert await sr.get(f"/schemas/ids/{schema_id}/versions") == (200, [{"subject": "users-value", "version": 1}])
    assert await sr.get(f"/schemas/ids/{schema_id}/subjects") == (200, ["users-value"])
    assert await sr.post("/subjects/users-value", avro(RECORD)) == (200, want)
    # the same schema under another subject keeps its id
    assert await sr.post("/subjects/other/versions", avro(RECORD)) == (200, {"id": schema_id})
