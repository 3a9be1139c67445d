"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers.

Topic configs are `gateway.domain.topic_configs.TOPIC_CONFIGS` (every one of Kafka 4.4's); each is
reported with the source of its value and its synonyms as Kafka's `ConfigHelper` does: the topic's
own value (DYNAMIC_TOPIC_CONFIG), else the cluster-wide default an admin set under the broker name
(DYNAMIC_DEFAULT_BROKER_CONFIG, kept in Redis for every gateway), else Kafka's default
(DEFAULT_CONFIG). A broker resource named by a node id lists the gateway's settings under Kafka's
names (STATIC_BROKER_CONFIG, read-only) and the dynamic broker configs; the default broker resource
(name "") holds the cluster-wide defaults an admin set, and a broker resource named by the node id of
the gateway the request reached holds that gateway's own (DYNAMIC_BROKER_CONFIG, kept in Redis by
node id), which apply over the cluster-wide ones on that gateway, as Kafka's per-broker dynamic
configs do (DynamicBrokerConfig). Both take the configs Kafka changes at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from gateway.config import SETTINGS
from gateway.domain.client_metrics import SPECS as CLIENT_METRICS_SPECS
from gateway.domain.log import BrokerDefaults
from gateway.domain.security import CLUSTER_NAME, Operation, ResourceType
from gateway.domain.topic_configs import BROKER_DEFAULTS, TOPIC_CONFIGS, Change, ConfigDef, Kind, Op
from gateway.errors import AuthorizationFailed, InvalidRequest, TopicNotFound
from gateway.kafka import codec, share
from gateway.kafka.dispatch import ApiKey, RequestContext, handles
from gateway.kafka.errors import error_message, kafka_error

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # KIP-848's group configs: a share group's here (`gateway.kafka.share`)
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
# ConfigResource.Type's ids: any other is UNKNOWN, which fails a DescribeConfigs request as a whole
RESOURCE_TYPES = frozenset({RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS,
                            RESOURCE_GROUP})
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_CLIENT_METRICS = 7  # CLIENT_METRICS_CONFIG
# Errors.INVALID_REQUEST's own message, which Kafka answers for a request it fails as a whole
INVALID_REQUEST_MESSAGE = ("This most likely occurs because of a request being malformed by the client library or "
                           "the message was sent to an incompatible broker. See the broker logs for more details.")
REPLICATION_DOC = (
    "A replication factor up to the number of live gateways is accepted, as by a Kafka cluster of as many "
    "brokers, and each partition lists every live gateway as its replicas and ISR, the partition's leader "
    "first: every gateway serves every partition. The number copies "
    "nothing here: durability is Redis's, its persistence (appendfsync) and its own replicas."
)


Synonym = tuple[str, str, int]  # name, value, source


def _entry(name: str, kind: Kind, doc: str | None, synonyms: list[Synonym], *,
           read_only: bool = False, default: str | None = None) -> dict[str, Any]:
    """A config whose value and source are those of its first synonym (the one that applies), else
    `default`, Kafka's."""
    _, value, source = synonyms[0] if synonyms else (name, default, SOURCE_DEFAULT)
    return {"name": name, "value": value, "read_only": read_only, "config_source": source, "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms], "config_type": kind,
            "documentation": doc}


def _synonyms(spec: ConfigDef, own: str | None, defaults: BrokerDefaults) -> list[Synonym]:
    """Where the value could come from, the one that applies first (Kafka's order, DynamicBrokerConfig's
    brokerSynonyms after the topic's own): the topic's own, this broker's dynamic config, the
    cluster-wide default, Kafka's default under the broker name (none for a config Kafka has no
    broker config for: its value is the default all the same)."""
    out = [] if own is None else [(spec.name, own, SOURCE_TOPIC)]
    if spec.broker is None:  # no broker config: Kafka's ServerTopicConfigSynonyms has none to list
        return out
    if spec.broker in defaults.own:
        out.append((spec.broker, defaults.own[spec.broker], SOURCE_DYNAMIC_BROKER))
    if spec.broker in defaults.cluster:
        out.append((spec.broker, defaults.cluster[spec.broker], SOURCE_DYNAMIC_DEFAULT_BROKER))
    if spec.broker_fallback is None:
        out.append((spec.broker, spec.default, SOURCE_DEFAULT))
    elif spec.broker in defaults.own or spec.broker in defaults.cluster:
        # Kafka lists broker synonyms from its own name on: none while that one is unset
        out.append((*spec.broker_fallback, SOURCE_DEFAULT))
    return out


def java_hash_order(names: list[str]) -> list[str]:
    """`names` in the order a java.util.HashMap filled with them in this order iterates: by bucket of
    String.hashCode spread as HashMap.hash does, in a table grown from 16 at a load factor of 0.75, a
    bucket's names in insertion order. Kafka's ConfigHelper lists a topic's configs in the order of
    LogConfig.nonInternalValues(), such a map filled in LogConfig's definition order
    (ConfigHelperUtils.createResponseConfig; ASCII names, one UTF-16 unit per character)."""
    table = 16
    while len(names) > table * 3 // 4:
        table *= 2

    def bucket(name: str) -> int:
        h = 0
        for c in name:
            h = (31 * h + ord(c)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (table - 1)

    return sorted(names, key=bucket)  # stable: ties keep insertion order


DESCRIBE_ORDER = [*java_hash_order([n for n, c in TOPIC_CONFIGS.items() if not c.own]),
                  *(n for n, c in TOPIC_CONFIGS.items() if c.own)]
"""DescribeConfigs lists a topic's configs in Kafka's order, then the gateway's own."""
CREATE_ORDER = sorted(TOPIC_CONFIGS)
"""CreateTopics (v5+) lists a new topic's configs by name, as Kafka's ReplicationControlManager.createTopic
sorts them."""


def topic_config_entries(config: dict[str, str], defaults: BrokerDefaults, order: list[str],
                         keys: list[str] | None = None) -> list[dict[str, Any]]:
    """Every topic config (or those in `keys`) in `order` with the value that applies and where it comes
    from."""
    out = []
    for name in order:
        spec = TOPIC_CONFIGS[name]
        if keys is not None and name not in keys:
            continue
        out.append(_entry(name, spec.kind, spec.doc, _synonyms(spec, config.get(name), defaults), default=spec.default))
    return out


def _static_broker_configs(ctx: RequestContext) -> dict[str, tuple[str, Kind, str]]:
    """The gateway's own settings under Kafka's names: (value, type, documentation)."""
    cfg = ctx.services.config
    host, port = cfg.kafka_advertised
    listener = f"{_protocol(cfg)}://{host}:{port or ctx.connection.local_port}"
    return {
        "broker.id": (str(cfg.node_id), Kind.INT, "This gateway's node id (--node-id)."),
        "node.id": (str(cfg.node_id), Kind.INT, "This gateway's node id (--node-id)."),
        "num.partitions": (str(cfg.default_partitions), Kind.INT, "Partitions of an auto-created topic "
                           "(--default-partitions)."),
        "auto.create.topics.enable": (str(cfg.auto_create_topics).lower(), Kind.BOOLEAN,
                                      "Create topics on first use (--auto-create-topics)."),
        "default.replication.factor": ("1", Kind.INT, REPLICATION_DOC),
        "socket.request.max.bytes": (str(cfg.max_frame_bytes), Kind.INT, "Largest request (--max-frame-bytes)."),
        "advertised.listeners": (listener, Kind.LIST, "Where clients reach this gateway (--advertised-host, "
                                 "--advertised-port)."),
        "transaction.max.timeout.ms": (str(cfg.txn_max_timeout_ms), Kind.INT, "Longest transaction timeout "
                                       "a producer may ask for (--txn-max-timeout-ms)."),
        "log.retention.check.interval.ms": (str(int(cfg.retention_check_interval * 1000)), Kind.LONG,
                                            "Time between retention passes (--retention-check-interval)."),
        "remote.log.storage.system.enable": (str(bool(cfg.tier_location)).lower(), Kind.BOOLEAN,
                                             "Whether topics may keep older segments in tiered storage "
                                             "(--tier-store)."),
    }


# Kafka's static GroupCoordinatorConfig settings the gateway has (not among its RECONFIGURABLE_CONFIGS):
# Kafka's name -> the setting, its type and GroupCoordinatorConfig's documentation
GROUP_COORDINATOR_CONFIGS = {
    "group.streams.session.timeout.ms": (
        "group_streams_session_timeout_ms", Kind.INT,
        "The timeout to detect client failures when using the streams group protocol."),
    "group.streams.min.session.timeout.ms": (
        "group_streams_min_session_timeout_ms", Kind.INT,
        "The minimum allowed value for the group-level configuration of streams.session.timeout.ms"),
    "group.streams.max.session.timeout.ms": (
        "group_streams_max_session_timeout_ms", Kind.INT,
        "The maximum allowed value for the group-level configuration of streams.session.timeout.ms"),
}


def _group_coordinator_entries(ctx: RequestContext, wanted: Callable[[str], bool]) -> list[dict[str, Any]]:
    """GROUP_COORDINATOR_CONFIGS as Kafka's broker describes them (ConfigHelper.createBrokerConfigEntry):
    a setting at Kafka's default is DEFAULT_CONFIG; another is STATIC_BROKER_CONFIG, as if in its
    server.properties, with the default its synonym; all read-only."""
    out = []
    for name, (setting, kind, doc) in GROUP_COORDINATOR_CONFIGS.items():
        if wanted(name):
            value, default = str(getattr(ctx.services.config, setting)), str(SETTINGS[setting].default)
            synonyms = [(name, value, SOURCE_STATIC_BROKER)] if value != default else []
            out.append(_entry(name, kind, doc, [*synonyms, (name, default, SOURCE_DEFAULT)], read_only=True))
    return out


def this_broker(ctx: RequestContext, name: str, *, describe: bool) -> None:
    """A broker resource named by a node id names the gateway the request reached, as Kafka's broker
    checks (ConfigHelper.describeConfigs; ConfigAdminManager.validateResourceNameIsCurrentNodeId):
    clients send a broker's configs requests to that broker."""
    node = ctx.services.config.node_id
    try:
        asked = int(name)
    except ValueError:
        what = "Broker id" if describe else "Node id"
        raise InvalidRequest(f"{what} must be an integer, but it is: {name}") from None
    if asked != node:
        also = " or empty string" if describe else ""
        raise InvalidRequest(f"Unexpected broker id, expected {node}{also}, but received {name}")


async def _broker_entries(ctx: RequestContext, name: str, keys: list[str] | None) -> list[dict[str, Any]]:
    defaults = await ctx.services.log.broker_defaults(fresh=True)

    def wanted(key: str) -> bool:
        return keys is None or key in keys

    out = []
    if name == "":  # the cluster-wide defaults: those set
        for broker, value in defaults.cluster.items():
            spec = BROKER_DEFAULTS.get(broker)
            if spec is not None and wanted(broker):
                out.append(_entry(broker, spec.kind, spec.doc, [(broker, value, SOURCE_DYNAMIC_DEFAULT_BROKER)]))
        return out
    this_broker(ctx, name, describe=True)
    for key, (value, kind, doc) in _static_broker_configs(ctx).items():
        if wanted(key):
            out.append(_entry(key, kind, doc, [(key, value, SOURCE_STATIC_BROKER)], read_only=True))
    out += _group_coordinator_entries(ctx, wanted)
    for broker, spec in BROKER_DEFAULTS.items():
        if wanted(broker):
            # a broker config whose default lives in a fallback (log.retention.ms: log.retention.hours)
            # has none of its own: Kafka's broker describes it unset, null, as KafkaConfig holds it
            default = None if spec.broker_fallback is not None else spec.default
            out.append(_entry(broker, spec.kind, spec.doc, _synonyms(spec, None, defaults), default=default))
    return out


CLIENT_METRICS_ORDER = java_hash_order(list(CLIENT_METRICS_SPECS))
"""ConfigHelper lists a client-metrics subscription's configs from a HashMap of them."""


async def _client_metrics_entries(ctx: RequestContext, name: str, keys: list[str] | None) -> list[dict[str, Any]]:
    """Every config of a KIP-714 subscription, its own (CLIENT_METRICS_CONFIG) else the default, as
    ConfigHelper.describeConfigs lists a CLIENT_METRICS resource; one never set has its defaults."""
    if not name:
        raise InvalidRequest("Client metrics subscription name must not be empty")
    _, subs = await ctx.services.client_metrics.subscriptions()
    own = subs.get(name, {})
    out = []
    for key in CLIENT_METRICS_ORDER:
        if keys is None or key in keys:
            spec = CLIENT_METRICS_SPECS[key]
            source = SOURCE_CLIENT_METRICS if key in own else SOURCE_DEFAULT
            out.append(_entry(key, spec.kind, spec.doc, [(key, own.get(key, spec.default), source)]))
    return out


def _protocol(cfg: Any) -> str:
    """The listener's security protocol as Kafka names it."""
    return ("SASL_" if cfg.auth else "") + ("SSL" if cfg.tls_cert_file else "PLAINTEXT")


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, req: Any) -> Any:
    """No keys (null or empty) describe every config, as Kafka's ConfigHelperUtils does; a resource of
    a type Kafka does not know fails the whole request, every resource INVALID_REQUEST (ConfigHelper.
    handleDescribeConfigsRequest throws while sorting the resources for authorization)."""
    cls = codec.response_class(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
    if any(r.resource_type not in RESOURCE_TYPES for r in req.resources):
        return codec.build(cls, {"throttle_time": 0, "results": [
            {"error_code": KafkaError.invalid_request, "error_message": INVALID_REQUEST_MESSAGE,
             "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
            for r in req.resources]})
    results = []
    for r in req.resources:
        keys = list(r.configuration_keys or ()) or None
        # a described resource's message is "", the schema's default (ConfigHelper sets none)
        res: dict[str, Any] = {"error_code": KafkaError.none, "error_message": "",
                               "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
        try:
            if r.resource_type == RESOURCE_TOPIC:
                if not await ctx.allowed(ResourceType.TOPIC, r.resource_name, Operation.DESCRIBE_CONFIGS):
                    raise AuthorizationFailed(f"not allowed to describe {r.resource_name!r}")
                info = await ctx.services.log.topic(r.resource_name, create=False)
                defaults = await ctx.services.log.broker_defaults(fresh=True)
                res["configs"] = topic_config_entries(info.config, defaults, DESCRIBE_ORDER, keys)
            elif r.resource_type == RESOURCE_BROKER:
                if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE_CONFIGS):
                    res.update(error_code=KafkaError.cluster_authorization_failed, error_message="not authorized")
                else:
                    res["configs"] = await _broker_entries(ctx, r.resource_name, keys)
            elif r.resource_type == RESOURCE_CLIENT_METRICS:
                if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE_CONFIGS):
                    res.update(error_code=KafkaError.cluster_authorization_failed, error_message="not authorized")
                else:
                    res["configs"] = await _client_metrics_entries(ctx, r.resource_name, keys)
            elif r.resource_type == RESOURCE_GROUP:
                if not await ctx.allowed(ResourceType.GROUP, r.resource_name, Operation.DESCRIBE_CONFIGS):
                    res.update(error_code=KafkaError.group_authorization_failed, error_message="not authorized")
                else:
                    res["configs"] = await share.describe_group_configs(ctx, r.resource_name, keys)
            else:
                res.update(error_code=KafkaError.invalid_request, error_message="only topic and broker configs")
        except TopicNotFound as exc:  # Kafka's message is empty
            res.update(error_code=kafka_error(exc), error_message="")
        except Exception as exc:
            res.update(error_code=kafka_error(exc), error_message=error_message(exc))
        if not getattr(req, "include_synonyms", False):
            for c in res["configs"]:
                c["synonyms"] = []
        if not getattr(req, "include_documentation", False):
            for c in res["configs"]:
                c["documentation"] = None
        results.append(res)
    return codec.build(cls, {"throttle_time": 0, "results": results})


async def _alter(ctx: RequestContext, r: Any, changes: list[Change], incremental: bool,
                 validate_only: bool) -> dict[str, Any]:
    res: dict[str, Any] = {"error_code": KafkaError.none, "error_message": None,
                           "resource_type": r.resource_type, "resource_name": r.resource_name}
    log = ctx.services.log
    try:
        if r.resource_type == RESOURCE_TOPIC:
            if not await ctx.allowed(ResourceType.TOPIC, r.resource_name, Operation.ALTER_CONFIGS):
                res.update(error_code=KafkaError.topic_authorization_failed, error_message="not authorized")
            else:
                await log.alter_config(r.resource_name, changes, incremental=incremental, validate_only=validate_only)
        elif r.resource_type == RESOURCE_BROKER:
            if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER_CONFIGS):
                res.update(error_code=KafkaError.cluster_authorization_failed, error_message="not authorized")
            else:
                if r.resource_name != "":
                    this_broker(ctx, r.resource_name, describe=False)
                await log.alter_cluster_config(changes, incremental=incremental, validate_only=validate_only,
                                               node=r.resource_name != "")
        elif r.resource_type == RESOURCE_CLIENT_METRICS:
            if not await ctx.allowed(ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER_CONFIGS):
                res.update(error_code=KafkaError.cluster_authorization_failed, error_message="not authorized")
            else:
                await ctx.services.client_metrics.alter(r.resource_name, changes, incremental=incremental,
                                                        validate_only=validate_only)
        elif r.resource_type == RESOURCE_GROUP:
            if not await ctx.allowed(ResourceType.GROUP, r.resource_name, Operation.ALTER_CONFIGS):
                res.update(error_code=KafkaError.group_authorization_failed, error_message="not authorized")
            else:
                await share.alter_group_configs(ctx, r.resource_name, changes, incremental, validate_only)
        else:
            res.update(error_code=KafkaError.invalid_request, error_message="only topic and broker configs change")
    except TopicNotFound as exc:
        res.update(error_code=kafka_error(exc), error_message=f"The topic '{r.resource_name}' does not exist.")
    except Exception as exc:
        res.update(error_code=kafka_error(exc), error_message=error_message(exc))
    return res


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, req: Any) -> Any:
    """The whole set is replaced: configs not named go back to their defaults, as in Kafka."""
    results = [
        await _alter(ctx, r, [Change(c.name, Op.SET, c.value) for c in r.configs], False, req.validate_only)
        for r in req.resources
    ]
    return codec.build(codec.response_class(ApiKey.ALTER_CONFIGS, ctx.api_version),
                       {"throttle_time": 0, "responses": results})


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    """SET, DELETE, and on list configs APPEND and SUBTRACT (`topic_configs.apply`). An operation
    Kafka does not know fails its resource with UNKNOWN_SERVER_ERROR, as Kafka 4.4's controller
    answers it (AlterConfigOp.OpType.forId gives null, which ConfigurationControlManager trips on),
    here with a message that names it and nothing changed."""
    results = []
    for r in req.resources:
        try:
            changes = [Change(c.name, Op(c.config_operation), c.value) for c in r.configs]
        except ValueError:
            bad = next(c.config_operation for c in r.configs if c.config_operation not in set(Op))
            results.append({"error_code": KafkaError.unknown_server_error,
                            "error_message": f"Unknown config operation {bad}",
                            "resource_type": r.resource_type, "resource_name": r.resource_name})
            continue
        results.append(await _alter(ctx, r, changes, True, req.validate_only))
    return codec.build(codec.response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, ctx.api_version),
                       {"throttle_time": 0, "responses": results})
