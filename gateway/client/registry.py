"""A small client of a Schema Registry's REST API (Confluent's, which the gateway serves on
`--schema-registry-port`): the calls typed producers and consumers make, schemas by id cached.

The client is given the registry's URL (`Client.connect(schema_registry_url=...)`), as Kafka
applications give it to their serializers (`schema.registry.url`): the registry is an HTTP service
of its own, served by the first worker only, possibly behind another address, proxy or TLS than
the native port, so the gateway's native address does not say where it is. It authenticates as the
client does: HTTP Basic with the username and password, or a bearer token, as the registry takes them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from gateway.client.errors import IncompatibleSchema, SchemaRegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True)
class Registered:
    """A schema as the registry holds it: its id, type, text and references."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, schema_id: int, body: dict[str, Any]) -> Registered:
        return cls(schema_id, body.get("schemaType", "AVRO"), body["schema"], tuple(body.get("references", ())))


class RegistryClient:
    def __init__(self, url: str, *, username: str = "", password: str = "", token: str = "",
                 timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        elif username:
            basic = base64.b64encode(f"{username}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {basic}"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._by_id: dict[int, Registered] = {}

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        try:
            async with self._session.request(method, self.url + path,
                                             data=None if body is None else json.dumps(body)) as r:
                text = await r.text()
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SchemaRegistryError(f"schema registry {self.url} unreachable: {exc or type(exc).__name__}",
                                      status=0) from None
        try:
            answer = json.loads(text)
        except ValueError:
            answer = text
        if status < 400:
            return answer
        code = answer.get("error_code", status) if isinstance(answer, dict) else status
        message = answer.get("message", text) if isinstance(answer, dict) else text
        error = IncompatibleSchema if status == 409 else SchemaRegistryError
        raise error(f"schema registry: {message} (HTTP {status}, error code {code})", status=status, error_code=code)

    async def register(self, subject: str, schema: dict[str, Any], normalize: bool = False) -> int:
        """The id of `schema` under `subject`, registered now unless it is there already (409 when
        the subject's compatibility level refuses it)."""
        answer = await self._call("POST", f"/subjects/{quote(subject, safe='')}/versions?normalize="
                                  f"{str(normalize).lower()}", schema)
        return int(answer["id"])

    async def lookup(self, subject: str, schema: dict[str, Any], normalize: bool = False) -> dict[str, Any]:
        """The subject's version holding `schema` (40403 when it has none)."""
        answer: dict[str, Any] = await self._call(
            "POST", f"/subjects/{quote(subject, safe='')}?normalize={str(normalize).lower()}", schema)
        return answer

    async def version(self, subject: str, version: int | str = "latest") -> dict[str, Any]:
        answer: dict[str, Any] = await self._call("GET", f"/subjects/{quote(subject, safe='')}/versions/{version}")
        return answer

    async def schema(self, schema_id: int) -> Registered:
        """The schema of an id, asked once per id: an id never changes what it stands for."""
        found = self._by_id.get(schema_id)
        if found is None:
            body = await self._call("GET", f"/schemas/ids/{schema_id}?format=serialized")
            found = self._by_id[schema_id] = Registered.of(schema_id, body)
        return found

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
