"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topic configs (gateway.domain.log.TOPIC_CONFIGS).

The broker resource answers a few read-only values so admin tools can show something true.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.log import TOPIC_CONFIGS, validate_config
from gateway.domain.security import Operation, ResourceType
from gateway.errors import AuthorizationFailed
from gateway.kafka import codec
from gateway.kafka.authz import may_describe_cluster
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_LONG = 1, 2, 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _type(name: str) -> int:
    spec = TOPIC_CONFIGS[name]
    if spec.choices == ("true", "false"):
        return TYPE_BOOLEAN
    return TYPE_STRING if spec.choices else TYPE_LONG


def topic_config_entries(config: dict[str, str], keys: list[str] | None = None) -> list[dict[str, Any]]:
    """Every known topic config (or those in `keys`) with its effective value and where it comes from."""
    out = []
    for name, spec in TOPIC_CONFIGS.items():
        if keys is not None and name not in keys:
            continue
        explicit = name in config
        source = SOURCE_TOPIC if explicit else SOURCE_DEFAULT
        value = config[name] if explicit else spec.default
        out.append({
            "name": name, "value": value, "read_only": False, "config_source": source, "is_sensitive": False,
            "synonyms": [{"name": name, "value": value, "source": source}], "config_type": _type(name),
            "documentation": spec.doc or None,
        })
    return out


def _broker_entries(ctx: RequestContext, keys: list[str] | None) -> list[dict[str, Any]]:
    cfg = ctx.services.config
    host, port = cfg.kafka_advertised
    values = {
        "broker.id": (str(cfg.node_id), TYPE_LONG),
        "num.partitions": (str(cfg.default_partitions), TYPE_LONG),
        "auto.create.topics.enable": (str(cfg.auto_create_topics).lower(), TYPE_BOOLEAN),
        "socket.request.max.bytes": (str(cfg.max_frame_bytes), TYPE_LONG),
        "advertised.listeners": (f"{_protocol(cfg)}://{host}:{port or ctx.connection.local_port}", TYPE_STRING),
    }
    return [
        {"name": k, "value": v, "read_only": True, "config_source": SOURCE_STATIC_BROKER, "is_sensitive": False,
         "synonyms": [], "config_type": t, "documentation": None}
        for k, (v, t) in values.items()
        if keys is None or k in keys
    ]


def _protocol(cfg: Any) -> str:
    """The listener's security protocol as Kafka names it."""
    return ("SASL_" if cfg.auth else "") + ("SSL" if cfg.tls_cert_file else "PLAINTEXT")


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, req: Any) -> Any:
    results = []
    for r in req.resources:
        keys = None if r.configuration_keys is None else list(r.configuration_keys)
        res: dict[str, Any] = {"error_code": KafkaError.none, "error_message": None,
                               "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
        try:
            if r.resource_type == RESOURCE_TOPIC:
                if not await ctx.allowed(ResourceType.TOPIC, r.resource_name, Operation.DESCRIBE_CONFIGS):
                    raise AuthorizationFailed(f"not allowed to describe {r.resource_name!r}")
                info = await ctx.services.log.topic(r.resource_name, create=False)
                res["configs"] = topic_config_entries(info.config, keys)
            elif r.resource_type == RESOURCE_BROKER:
                if not await may_describe_cluster(ctx):
                    res.update(error_code=KafkaError.cluster_authorization_failed, error_message="not authorized")
                else:
                    res["configs"] = _broker_entries(ctx, keys)
            else:
                res.update(error_code=KafkaError.invalid_request, error_message="only topic and broker configs")
        except Exception as exc:
            res.update(error_code=kafka_error(exc), error_message=error_message(exc))
        if not getattr(req, "include_synonyms", False):
            for c in res["configs"]:
                c["synonyms"] = []
        if not getattr(req, "include_documentation", False):
            for c in res["configs"]:
                c["documentation"] = None
        results.append(res)
    return codec.build(codec.response_class(ApiKey.DESCRIBE_CONFIGS, ctx.api_version),
                       {"throttle_time": 0, "results": results})


async def _alter(ctx: RequestContext, r: Any, changes: dict[str, str | None], incremental: bool,
                 validate_only: bool) -> dict[str, Any]:
    res: dict[str, Any] = {"error_code": KafkaError.none, "error_message": None,
                           "resource_type": r.resource_type, "resource_name": r.resource_name}
    try:
        if r.resource_type != RESOURCE_TOPIC:
            res.update(error_code=KafkaError.invalid_request, error_message="only topic configs can change")
        elif not await ctx.allowed(ResourceType.TOPIC, r.resource_name, Operation.ALTER_CONFIGS):
            res.update(error_code=KafkaError.topic_authorization_failed, error_message="not authorized")
        elif validate_only:
            await ctx.services.log.topic(r.resource_name, create=False)
            validate_config(changes)
        else:
            await ctx.services.log.alter_config(r.resource_name, changes, incremental=incremental)
    except Exception as exc:
        res.update(error_code=kafka_error(exc), error_message=error_message(exc))
    return res


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, req: Any) -> Any:
    """The whole set is replaced: configs not named go back to their defaults, as in Kafka."""
    results = [
        await _alter(ctx, r, {c.name: c.value for c in r.configs}, False, req.validate_only)
        for r in req.resources
    ]
    return codec.build(codec.response_class(ApiKey.ALTER_CONFIGS, ctx.api_version),
                       {"throttle_time": 0, "responses": results})


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    results = []
    for r in req.resources:
        changes: dict[str, str | None] = {}
        bad = None
        for c in r.configs:
            if c.config_operation == OP_SET:
                changes[c.name] = c.value
            elif c.config_operation == OP_DELETE:
                changes[c.name] = None
            else:
                bad = f"{c.name}: APPEND and SUBTRACT apply to list configs, and no topic config is a list"
        if bad is not None:
            results.append({"error_code": KafkaError.invalid_config, "error_message": bad,
                            "resource_type": r.resource_type, "resource_name": r.resource_name})
            continue
        results.append(await _alter(ctx, r, changes, True, req.validate_only))
    return codec.build(codec.response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.api_version),
                       {"throttle_time": 0, "responses": results})
