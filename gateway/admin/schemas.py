"""The Schema Registry's REST face: Confluent Schema Registry's API on its own listener
(`--schema-registry-port`), over `gateway.domain.schemas`.

Routes, bodies and error bodies follow Confluent's API reference (docs.confluent.io,
schema-registry/develop/api) and Karapace's routers. With authentication on, a caller
authenticates with HTTP Basic (a gateway user) as Confluent's registry takes it, or a bearer
token; a subject is authorised as the topic of the same name (READ to read it, WRITE to register,
DELETE to delete, ALTER_CONFIGS for its level and mode; the global level and mode need the
cluster's ALTER_CONFIGS): see the README's "Schema Registry"."""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import telemetry
from gateway.admin.listener import HttpListener, listen
from gateway.admin.security import principal_of
from gateway.domain.schemas import errors
from gateway.domain.schemas.errors import RegistryError
from gateway.domain.schemas.service import SchemaRegistry
from gateway.domain.schemas.view import Version
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType, SecurityService
from gateway.domain.services import Services
from gateway.errors import AuthenticationFailed, GatewayError

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_CALLER: ContextVar[str | None] = ContextVar("schema_registry_caller", default=None)  # set per request's task


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=CONTENT_TYPE)


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"error_code": code, "message": message}, status)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


@web.middleware
async def _answered(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as the registry's JSON bodies; every request counted (face "schema-registry", api the
    method and route), an error by the registry's error code (40401, 409, ...)."""
    resource = request.match_info.route.resource
    stats = telemetry.api("schema-registry",
                          f"{request.method} {resource.canonical}" if resource is not None else "unmatched")
    began = time.perf_counter()
    response: web.StreamResponse
    code = ""  # the registry's error code, counted by it
    try:
        response = await handler(request)
    except RegistryError as exc:
        response, code = _error(exc.status, exc.error_code, str(exc)), str(exc.error_code)
    except AuthenticationFailed:
        response = _error(401, 401, "Unauthorized")
        response.headers["WWW-Authenticate"] = 'Basic realm="schema-registry"'
    except GatewayError as exc:  # storage unavailable or full: the registry's backend error
        response = _error(500, 50001 if exc.retriable else 500, f"Error in the backend data store: {exc}")
    except web.HTTPException as exc:
        response = _error(exc.status, exc.status, f"HTTP {exc.status} {exc.reason}")
    except Exception:  # a bug: logged, and answered as the registry answers one
        log.exception("schema registry: %s %s failed", request.method, request.path)
        response = _error(500, 500, "Internal Server Error")
    finally:
        stats.done(time.perf_counter() - began)
    if response.status >= 400:
        stats.failed(code or f"HTTP_{response.status}")
    return response


class SchemaRegistryApi:
    def __init__(self, registry: SchemaRegistry, security: SecurityService) -> None:
        self.registry = registry
        self.security = security

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.root),
            web.get("/schemas/types", self.types),
            web.get("/contexts", self.contexts),
            web.get("/schemas", self.list_schemas),
            web.get("/schemas/ids/{id}", self.schema_by_id),
            web.get("/schemas/ids/{id}/schema", self.raw_by_id),
            web.get("/schemas/ids/{id}/versions", self.versions_by_id),
            web.get("/schemas/ids/{id}/subjects", self.subjects_by_id),
            web.get("/subjects", self.subjects),
            web.post("/subjects/{subject}", self.lookup),
            web.delete("/subjects/{subject}", self.delete_subject),
            web.get("/subjects/{subject}/versions", self.versions),
            web.post("/subjects/{subject}/versions", self.register),
            web.get("/subjects/{subject}/versions/{version}", self.get_version),
            web.delete("/subjects/{subject}/versions/{version}", self.delete_version),
            web.get("/subjects/{subject}/versions/{version}/schema", self.raw_version),
            web.get("/subjects/{subject}/versions/{version}/referencedby", self.referenced_by),
            web.post("/compatibility/subjects/{subject}/versions", self.check),
            web.post("/compatibility/subjects/{subject}/versions/{version}", self.check),
            web.get("/config", self.get_config),
            web.put("/config", self.set_config),
            web.delete("/config", self.delete_config),
            web.get("/config/{subject}", self.get_config),
            web.put("/config/{subject}", self.set_config),
            web.delete("/config/{subject}", self.delete_config),
            web.get("/mode", self.get_mode),
            web.put("/mode", self.set_mode),
            web.delete("/mode", self.delete_mode),
            web.get("/mode/{subject}", self.get_mode),
            web.put("/mode/{subject}", self.set_mode),
            web.delete("/mode/{subject}", self.delete_mode),
        ]

    # -- who may -------------------------------------------------------------------------------

    def authentication(self) -> Any:
        security = self.security

        @web.middleware
        async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
            if security.enabled:
                _CALLER.set(await principal_of(security, request.headers.get("Authorization", "")))
            return await handler(request)

        return authenticate

    async def _may(self, request: web.Request, subject: str | None, operation: Operation) -> bool:
        if not self.security.enabled:
            return True
        principal = _CALLER.get()
        if subject is None:
            return await self.security.authorize(principal, ResourceType.CLUSTER, CLUSTER_NAME, operation,
                                                 request.remote)
        return await self.security.authorize(principal, ResourceType.TOPIC, subject, operation, request.remote)

    async def _require(self, request: web.Request, subject: str | None, operation: Operation) -> None:
        if not await self._may(request, subject, operation):
            what = f"subject '{subject}'" if subject is not None else "the registry's settings"
            raise RegistryError(403, 40301, f"User is denied operation {operation.name} on {what}")

    async def _readable(self, request: web.Request, schema_id: int) -> Version:
        """The schema, if the caller may read a subject holding it (else 40403, as Karapace: an id
        says nothing to whom may not see it)."""
        view = await self.registry.fresh()
        v = self.registry.schema(schema_id)
        for holder in view.by_id(schema_id):
            if await self._may(request, holder.subject, Operation.READ):
                return v
        raise errors.schema_not_found(schema_id)

    # -- handlers -----------------------------------------------------------------------------

    async def root(self, request: web.Request) -> web.Response:
        return _json({})

    async def contexts(self, request: web.Request) -> web.Response:
        return _json(["."])  # the default context alone: subjects are not grouped into contexts here

    async def types(self, request: web.Request) -> web.Response:
        return _json(["JSON", "PROTOBUF", "AVRO"])

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise errors.bad_request("Unrecognized request body: not JSON") from None
        if not isinstance(body, dict):
            raise errors.bad_request("Unrecognized request body: not a JSON object")
        return body

    def _schema_id(self, request: web.Request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise RegistryError(404, 404, "HTTP 404 Not Found") from None

    def _shown(self, request: web.Request, v: Version) -> dict[str, Any]:
        """A version's body, a Protobuf schema as .proto text unless `format=serialized` asks for the
        serialized form (confluent-kafka's ProtobufDeserializer does)."""
        out = v.to_json()
        if v.schema_type == "PROTOBUF" and request.query.get("format") != "serialized":
            out["schema"] = self.registry.proto_text(v)
        return out

    async def list_schemas(self, request: web.Request) -> web.Response:
        view = await self.registry.fresh()
        deleted, latest = _flag(request, "deleted"), _flag(request, "latestOnly")
        prefix = request.query.get("subjectPrefix", "")
        out = []
        for s in sorted(view.subjects):
            if s.startswith(prefix) and await self._may(request, s, Operation.READ):
                versions = view.versions(s, deleted=deleted)
                out += [self._shown(request, v) for v in (versions[-1:] if latest else versions)]
        return _json(out)

    async def schema_by_id(self, request: web.Request) -> web.Response:
        schema_id = self._schema_id(request)
        v = await self._readable(request, schema_id)
        out = {k: x for k, x in self._shown(request, v).items() if k in ("schemaType", "references", "schema")}
        if _flag(request, "includeSubjects"):
            out["subjects"] = list(dict.fromkeys(h.subject for h in self.registry.view.by_id(schema_id)
                                                 if not h.deleted))
        if _flag(request, "fetchMaxId"):
            out["maxId"] = self.registry.view.max_id
        return _json(out)

    async def raw_by_id(self, request: web.Request) -> web.Response:
        v = await self._readable(request, self._schema_id(request))
        return web.Response(text=self._shown(request, v)["schema"], content_type=CONTENT_TYPE)

    async def versions_by_id(self, request: web.Request) -> web.Response:
        schema_id = self._schema_id(request)
        await self._readable(request, schema_id)
        holders = [h for h in self.registry.view.by_id(schema_id) if _flag(request, "deleted") or not h.deleted]
        return _json([{"subject": h.subject, "version": h.version} for h in holders
                      if await self._may(request, h.subject, Operation.READ)])

    async def subjects_by_id(self, request: web.Request) -> web.Response:
        schema_id = self._schema_id(request)
        await self._readable(request, schema_id)
        holders = [h for h in self.registry.view.by_id(schema_id) if _flag(request, "deleted") or not h.deleted]
        return _json(list(dict.fromkeys([h.subject for h in holders
                                         if await self._may(request, h.subject, Operation.READ)])))

    async def subjects(self, request: web.Request) -> web.Response:
        view = await self.registry.fresh()
        deleted, prefix = _flag(request, "deleted"), request.query.get("subjectPrefix", "")
        return _json([s for s in sorted(view.subjects) if s.startswith(prefix) and view.versions(s, deleted=deleted)
                      and await self._may(request, s, Operation.READ)])

    async def versions(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.READ)
        view = await self.registry.fresh()
        versions = view.versions(subject, deleted=_flag(request, "deleted"))
        if not versions:
            raise errors.subject_not_found(subject)
        return _json([v.version for v in versions])

    async def get_version(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.READ)
        await self.registry.fresh()
        v = self.registry.version(subject, request.match_info["version"], deleted=_flag(request, "deleted"))
        return _json(self._shown(request, v))

    async def raw_version(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.READ)
        await self.registry.fresh()
        v = self.registry.version(subject, request.match_info["version"], deleted=_flag(request, "deleted"))
        return web.Response(text=self._shown(request, v)["schema"], content_type=CONTENT_TYPE)

    async def referenced_by(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.READ)
        view = await self.registry.fresh()
        v = self.registry.version(subject, request.match_info["version"])
        return _json(view.referenced_by(subject, v.version))

    async def register(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.WRITE)
        v = await self.registry.register(subject, await self._body(request), normalize=_flag(request, "normalize"))
        return _json({"id": v.schema_id})

    async def lookup(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.READ)
        v = await self.registry.lookup(subject, await self._body(request), normalize=_flag(request, "normalize"),
                                       deleted=_flag(request, "deleted"))
        return _json(self._shown(request, v))

    async def delete_subject(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.DELETE)
        return _json(await self.registry.delete_subject(subject, permanent=_flag(request, "permanent")))

    async def delete_version(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.DELETE)
        return _json(await self.registry.delete_version(subject, request.match_info["version"],
                                                        permanent=_flag(request, "permanent")))

    async def check(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        await self._require(request, subject, Operation.READ)
        found = await self.registry.check(subject, request.match_info.get("version"), await self._body(request),
                                          normalize=_flag(request, "normalize"))
        out: dict[str, Any] = {"is_compatible": not found}
        if _flag(request, "verbose"):
            out["messages"] = found
        return _json(out)

    async def _settings(self, request: web.Request, change: bool) -> str | None:
        subject = request.match_info.get("subject")
        await self._require(request, subject, Operation.ALTER_CONFIGS if change else Operation.DESCRIBE_CONFIGS)
        return subject

    async def get_config(self, request: web.Request) -> web.Response:
        subject = await self._settings(request, False)
        view = await self.registry.fresh()
        if subject is not None and subject not in view.configs and not _flag(request, "defaultToGlobal"):
            raise errors.no_subject_config(subject)
        return _json({"compatibilityLevel": self.registry.level(subject).value})

    async def set_config(self, request: web.Request) -> web.Response:
        subject = await self._settings(request, True)
        body = await self._body(request)
        level = await self.registry.set_level(subject, body.get("compatibility", body.get("compatibilityLevel")))
        return _json({"compatibility": level.value})

    async def delete_config(self, request: web.Request) -> web.Response:
        subject = await self._settings(request, True)
        return _json({"compatibilityLevel": (await self.registry.delete_level(subject)).value})

    async def get_mode(self, request: web.Request) -> web.Response:
        subject = await self._settings(request, False)
        view = await self.registry.fresh()
        if subject is not None and subject not in view.modes and not _flag(request, "defaultToGlobal"):
            raise errors.no_subject_mode(subject)
        return _json({"mode": self.registry.mode(subject)})

    async def set_mode(self, request: web.Request) -> web.Response:
        subject = await self._settings(request, True)
        body = await self._body(request)
        return _json({"mode": await self.registry.set_mode(subject, body.get("mode"), force=_flag(request, "force"))})

    async def delete_mode(self, request: web.Request) -> web.Response:
        subject = await self._settings(request, True)
        return _json({"mode": await self.registry.delete_mode(subject)})


async def start_schema_registry(services: Services, host: str, port: int) -> HttpListener:
    api = SchemaRegistryApi(services.schemas, services.security)
    app = web.Application(middlewares=[_answered, api.authentication()])
    app.add_routes(api.routes())
    return await listen(app, services.config, host, port)
