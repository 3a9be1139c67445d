"""Every Redis key name the gateway uses. All keys of a partition share the hash tag `{t:topic:p}`."""

from __future__ import annotations

TOPICS = "gw:topics"
"""Hash: topic name -> msgpack record of the topic (see `log.py`). The registry's other keys carry
this name as their hash tag: a hash tag's slot is that of a key named like it, so they share its slot."""
TOPIC_SEQ = "{gw:topics}:seq"
"""Counter numbering the topics' incarnations and their records' versions."""
TOPICS_DROPPING = "{gw:topics}:dropping"
"""Hash: "<incarnation>:<topic>" -> partitions, for each deleted topic whose partitions are still to drop."""


def partition_tag(topic: str, partition: int) -> str:
    return f"{{t:{topic}:{partition}}}"


def log(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:log"


def clean_log(topic: str, partition: int, generation: int) -> str:
    """A compacted partition's cleaned stream of `generation` (the offsets below its clean boundary):
    two keys taken in turn, the current generation's and the one a cleaner pass builds."""
    return f"{partition_tag(topic, partition)}:clean{generation % 2}"


def wake(topic: str, partition: int) -> str:
    """Flag (PX) a gateway raises before its readers wait on the log: the next write publishes on
    the shard channel named `log(...)` and deletes it. Scripts derive it from the log key."""
    return f"{log(topic, partition)}:wake"


def read_mark(topic: str, partition: int) -> str:
    """String a read on a Redis Cluster writes (read-mark-1.lua) to count the replicas that hold it."""
    return f"{partition_tag(topic, partition)}:read-mark"


def slot_mark(key: str) -> str:
    """The read mark (read-mark-1.lua) of `key`'s slot: its hash tag's, or the key's own without one."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return f"{key[start:end + 1]}:read-mark" if end > start + 1 else f"{{{key}}}:read-mark"


def meta(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:meta"


def producers(topic: str, partition: int) -> str:
    return f"{partition_tag(topic, partition)}:pids"


def open_txns(topic: str, partition: int) -> str:
    """Hash of transactions with batches on this partition and no marker yet: pid -> "first:epoch"."""
    return f"{partition_tag(topic, partition)}:txns"


def expected_txns(topic: str, partition: int) -> str:
    """Hash of V1 transactions AddPartitionsToTxn is adding this partition to: pid -> epoch. Their
    first batch here may open the transaction; a marker removes the entry (KIP-890 part 1), and
    one of a producer id that transactions share leaves "<pid>:txn" -> "ended:<transaction>", so
    that it, or an older transaction's held back, is written once (txn-marker-6)."""
    return f"{partition_tag(topic, partition)}:txnexpect"


def aborted_txns(topic: str, partition: int) -> str:
    """Sorted set of aborted transactions' ranges: member "pid:first offset", score = marker offset."""
    return f"{partition_tag(topic, partition)}:aborted"


def subscription(topic: str, partition: int, name: str) -> str:
    """Hash of a subscription's durable position: `cursor` (all below acked) and mode."""
    return f"{partition_tag(topic, partition)}:sub:{name}"


def sub_acks(topic: str, partition: int, name: str) -> str:
    """Sorted set of offsets acked individually at or above the cursor (score = offset)."""
    return f"{partition_tag(topic, partition)}:acks:{name}"


def sub_pending(topic: str, partition: int, name: str) -> str:
    """Hash of offsets a transaction has acked but not yet committed: offset -> txn id, and 'c' ->
    "txn upto" for a pending cumulative ack (PIP-31's PENDING_ACK)."""
    return f"{partition_tag(topic, partition)}:pending:{name}"


def subscriptions_of(topic: str, partition: int) -> str:
    """Set of subscription names on a partition, so deleting a topic finds them."""
    return f"{partition_tag(topic, partition)}:subs"


def topic_keys_pattern(topic: str) -> str:
    """Every key of every partition of `topic` (a topic name holds no ':', '{' or '}')."""
    return f"{{t:{topic}:*}}:*"


PRODUCER_IDS = "gw:producer-ids"
"""Counter handing out producer ids; shared by both faces so their ids never collide in `pids`."""


GROUPS = "gw:groups"
"""Set of consumer group ids, for ListGroups; a hint kept beside each group's own keys."""


def group_tag(group_id: str) -> str:
    return f"{{g:{group_id}}}"


def group_meta(group_id: str) -> str:
    """Hash: v (version), state, gen (generation), doc (msgpack: protocol type/name, leader)."""
    return f"{group_tag(group_id)}:meta"


def group_members(group_id: str) -> str:
    """Hash: member id -> msgpack of the member (protocols, timeouts, assignment)."""
    return f"{group_tag(group_id)}:members"


def group_instances(group_id: str) -> str:
    """Hash: group.instance.id -> member id of the static member holding it."""
    return f"{group_tag(group_id)}:instances"


def group_consumer(group_id: str) -> str:
    """Hash of a KIP-848 consumer group: v (version), doc (packed epochs, target assignment, ...)."""
    return f"{group_tag(group_id)}:cmeta"


def group_consumer_members(group_id: str) -> str:
    """Hash of a KIP-848 consumer group's members: member id -> packed member."""
    return f"{group_tag(group_id)}:cmembers"


def group_streams(group_id: str) -> str:
    """Hash of a KIP-1071 streams group: v (version), doc (packed epochs, topology, target assignment, ...)."""
    return f"{group_tag(group_id)}:smeta"


def group_streams_members(group_id: str) -> str:
    """Hash of a KIP-1071 streams group's members: member id -> packed member."""
    return f"{group_tag(group_id)}:smembers"


def group_offsets(group_id: str) -> str:
    """Hash: "topic:partition" -> msgpack of (offset, leader epoch, metadata, commit time)."""
    return f"{group_tag(group_id)}:offsets"


def group_lag(group_id: str) -> str:
    """Stream: the group's lag over time, one entry per sample (`lua/lag-append-2.lua`), deleted with the group."""
    return f"{group_tag(group_id)}:lag"


# -- the transaction coordinator: one hash tag, so its scripts run in one slot -----------------------

TXN_SEQ = "{gw:txn}:seq"
TXN_OPEN = "{gw:txn}:open"
TXN_LOG = "{gw:txn}:log"


TXN_PARTS, TXN_SUBS, TXN_SETTLE = ":parts", ":subs", ":settle"
"""What a transaction's sets add to its hash's name: its partitions, its subscriptions, and what
its end settles on its partitions besides markers ("kind\0topic\0partition")."""


def txn(txn_id: str) -> str:
    return f"{{gw:txn}}:t:{txn_id}"


def txn_parts(txn_id: str) -> str:
    return txn(txn_id) + TXN_PARTS


def txn_subs(txn_id: str) -> str:
    return txn(txn_id) + TXN_SUBS


def txn_settle(txn_id: str) -> str:
    return txn(txn_id) + TXN_SETTLE

TXN_KEYS = "{gw:txn}:keys"


def txn_key_children(full_key: str) -> str:
    """Sorted set of the open transactions a transaction key's group commits settle: id by commit id."""
    return f"{{gw:txn}}:children:{full_key}"


def txn_key_incarnations(full_key: str) -> str:
    """Hash of a transaction key's former incarnations: incarnation -> the epoch it held."""
    return f"{{gw:txn}}:incs:{full_key}"


def txn_key(full_key: str) -> str:
    """A transaction key's hash (`owner&key`; Kafka's transactional.id too): epoch, pid, open txn."""
    return f"{{gw:txn}}:key:{full_key}"


def group_txn_offsets(group_id: str, txn_id: str) -> str:
    """Hash of a transaction's pending offset commits for a group, applied when it commits."""
    return f"{{g:{group_id}}}:txnoff:{txn_id}"


def group_txn_open(group_id: str) -> str:
    """Set of the transactions with offset commits pending for a group (require_stable asks it)."""
    return f"{{g:{group_id}}}:txnoffs"


# -- delayed delivery: one index per partition (its keys share the partition's tag) ----------------


def delay_meta(topic: str, partition: int) -> str:
    """Hash: seq (last message number), n (messages waiting), since (open bucket's first arrival), bid."""
    return f"{partition_tag(topic, partition)}:dl:meta"


def delay_held(topic: str, partition: int) -> str:
    """Stream of the waiting messages' batches, entry "<seq>-1" with fields b, n, t as in the log."""
    return f"{partition_tag(topic, partition)}:dl:held"


def delay_open(topic: str, partition: int) -> str:
    """Sorted set, the open bucket: member = seq as 8 big-endian bytes, score = delivery time."""
    return f"{partition_tag(topic, partition)}:dl:open"


def delay_buckets(topic: str, partition: int) -> str:
    """Sorted set of sealed bucket ids by their next delivery time. Bucket `id` is the hash
    `<this key>:<id>` and its segments the strings `<this key>:<id>:<k>` (named in Lua)."""
    return f"{partition_tag(topic, partition)}:dl:buckets"


def delay_pending(topic: str, partition: int, txn_id: str) -> str:
    """List of a transaction's delayed messages on this partition, held until it ends."""
    return f"{partition_tag(topic, partition)}:dl:txn:{txn_id}"


def delay_txns(topic: str, partition: int) -> str:
    """Set of transaction ids with delayed messages pending on this partition."""
    return f"{partition_tag(topic, partition)}:dl:txns"


# -- watermarks: an index per partition beside its log (its keys share the partition's tag) --------


def wm_marks(topic: str, partition: int) -> str:
    """Sorted set of the partition's watermark markers, score = offset, member
    "<offset> <transaction: 'pid:first offset' or -> <WatermarkMark bytes>"."""
    return f"{partition_tag(topic, partition)}:wm:marks"


def wm_snapshots(topic: str, partition: int) -> str:
    """Sorted set of W_SNAPSHOTs, score = offset, member "<offset>[ <offset of a pending mark>...]"."""
    return f"{partition_tag(topic, partition)}:wm:snaps"


def wm_snapshot_data(topic: str, partition: int) -> str:
    """Hash: snapshot offset -> WatermarkSnapshot bytes."""
    return f"{partition_tag(topic, partition)}:wm:snapdata"


def wm_meta(topic: str, partition: int) -> str:
    """Hash: n (markers since the latest snapshot)."""
    return f"{partition_tag(topic, partition)}:wm:meta"


def wm_txns(topic: str, partition: int) -> str:
    """Hash: transaction id -> offsets of its markers on this partition, until it is settled."""
    return f"{partition_tag(topic, partition)}:wm:txns"


DELAY_DUE = "{gw:delay}:due"
"""Sorted set: "topic:partition" -> earliest delivery time waiting there; what the scheduler sleeps on."""
DELAY_VERSIONS = "{gw:delay}:ver"
"""Hash: "topic:partition" -> schedules seen, so a move step never raises a time a schedule lowered."""
DELAY_PARTS = "{gw:delay}:parts"
"""Set of every partition that ever held a delayed message, walked when a scheduler starts."""


def sub_deliveries(topic: str, partition: int, name: str) -> str:
    """Hash of how often each offset not yet acknowledged was delivered (offset -> count), kept for
    a shared subscription with a delivery limit."""
    return f"{partition_tag(topic, partition)}:deliveries:{name}"


def subscription_owner(topic: str, name: str) -> str:
    """String naming the gateway (node id) that dispatches a subscription, under a lease (PX)."""
    return f"{partition_tag(topic, 0)}:owner:{name}"


def subscription_owners(topic: str, name: str) -> str:
    """Hash of a subscription's partition leases (partition -> "<node> <lease end ms>"), for
    dispatch split by partition across gateways; in the slot of `subscription_owner`."""
    return f"{partition_tag(topic, 0)}:owners:{name}"


def group_owner(group_id: str) -> str:
    """String "<node id> <host> <port>" of the gateway coordinating a group, under a lease (PX)."""
    return f"{group_tag(group_id)}:owner"


# -- the gateways sharing this Redis: one hash tag, so one script renews a lease and reads them all --

GATEWAYS = "{gw:nodes}:live"
"""Hash: node id -> "<lease end, Redis ms> <instance> <host> <kafka port> <native port> <admin port>"."""
NODE_IDS = "{gw:nodes}:seq"
"""Counter handing out node ids to gateways started without one."""
NODE_ADDRESSES = "{gw:nodes}:addresses"
"""Hash: "<host>:<kafka port>" -> the node id last registered there, so a restarted gateway keeps its id."""
LEADERS = "{gw:nodes}:leaders"
"""Hash: "<topic>:<partition>" -> "<leader> <replica>,..." for partitions a reassignment placed."""


# -- background roles: one gateway at a time holds each, under a lease with an epoch -----------------


def role_holder(role: str) -> str:
    """String "<node id> <instance> <epoch>" of the gateway running the role, with a TTL (PX)."""
    return f"{{gw:role:{role}}}:holder"


def role_epochs(role: str) -> str:
    """Counter: the last epoch handed out for the role, so every new holder's is higher."""
    return f"{{gw:role:{role}}}:epoch"


# -- users, tokens and ACLs: one hash tag, so a user's scripts run in one slot ----------------------

SEC_USERS = "{gw:sec}:users"
"""Set of user names."""
SEC_TOKENS = "{gw:sec}:tokens"
"""Hash: SHA-256 digest of a token (hex) -> the user it authenticates."""
SEC_ACLS = "{gw:sec}:acls"
"""Set of ACL entries, each a msgpack list (principal, resource type, pattern, name, operation, and
host and permission unless "*" and "allow")."""


def sec_user(name: str) -> str:
    """Hash: SCRAM credentials by mechanism, "created" (ms), "token:<id>" -> "<digest> <created ms>"."""
    return f"{{gw:sec}}:user:{name}"


# -- delegation tokens (KIP-48): one hash tag, so each token's scripts run in one slot ----------------

DT_IDS = "{gw:dt}:ids"
"""Set of the ids of the delegation tokens."""
DT_HMACS = "{gw:dt}:hmacs"
"""Hash: SHA-256 of a token's HMAC (hex) -> its id; the HMAC itself is never stored."""


def dt_token(token_id: str) -> str:
    """Hash: owner, requester, renewers (msgpack list of principals), issue, max and expiry (ms), digest."""
    return f"{{gw:dt}}:token:{token_id}"


CLUSTER_CONFIG = "gw:cluster-config"
"""String: msgpack {v: version, c: broker config name -> value}, the cluster-wide defaults of topic
configs (log.retention.ms, message.max.bytes, ...) that an admin set; every gateway reads them."""


FEATURES = "gw:features"
"""String: msgpack {v: version, c: feature name -> finalized level}, the features an admin finalized
with UpdateFeatures (transaction.version); kept as the cluster-wide configs are, the version being
ApiVersions' finalized_features_epoch."""


def broker_config(node_id: int) -> str:
    """String: msgpack {v: version, c: broker config name -> value}, one gateway's own dynamic broker
    configs (Kafka's DYNAMIC_BROKER_CONFIG), by its node id; they apply over the cluster-wide ones."""
    return f"gw:broker-config:{node_id}"


DEMOTED_REPLICAS = "gw:demoted-replicas"
"""Hash, on a Sentinel-watched primary: replica "host:port" -> the `replica-priority` it had before a
gateway set it to 0 while it was out of the in-sync set (`promotion.py`), to be given back."""


CLIENT_METRICS = "gw:client-metrics"
"""String: msgpack {v: version, c: subscription name -> {config name -> value}}, KIP-714's client-metrics
subscriptions (the CLIENT_METRICS config resources); the version is the one clients' state was built on."""


def telemetry_client(client_instance_id: str) -> str:
    """Hash: one KIP-714 client instance's push state (`lua/telemetry-get-1.lua`), expiring with it."""
    return f"gw:telemetry:{client_instance_id}"


def share_group_config(group_id: str) -> str:
    """A share group's configs (share.record.lock.duration.ms, ...): msgpack {v = version, c = map}."""
    return f"{group_tag(group_id)}:share-config"


SHARE_GROUPS = "gw:share-groups"
"""Set of share group ids, for ListGroups; a hint kept beside each group's own keys."""


SCHEMA_IDS = "{gw:schemas}:ids"
"""Hash: "fp:<fingerprint>" -> Schema Registry id, "id:<id>" -> fingerprint, "last" -> the last id handed out."""
SCHEMA_VERSIONS = "{gw:schemas}:versions"
"""Hash: "n:<subject>" -> the last version handed out in it, "f:<fingerprint>:<subject>" -> the version
last handed out to that schema there (same slot as SCHEMA_IDS: one script takes both)."""


def key_shared_members(topic: str, name: str) -> str:
    """Hash of a Key_Shared subscription's consumers across gateways (member -> "<expiry> <name>",
    "~gen" -> generation); in the slot of `subscription_owner`."""
    return f"{partition_tag(topic, 0)}:ksmembers:{name}"


def key_shared_sticky(topic: str, partition: int, name: str) -> str:
    """Hash of which Key_Shared member holds messages of each key hash of a partition (hash ->
    "<member> <count> <last offset sent> <generation>"), in the partition's slot."""
    return f"{partition_tag(topic, partition)}:sticky:{name}"


QUOTAS = "{gw:quotas}"
"""Hash: msgpack [[entity type, name or nil], ...] (sorted by type) -> msgpack map quota key -> value,
the client quotas that AlterClientQuotas sets (KIP-546's entities)."""


def quota_rate(kind: str, user: str, client_id: str) -> str:
    """Hash: sample window start (ms) -> amount, one quota entity's usage of one kind, shared by every
    gateway; its own hash tag, so entities spread over a cluster's slots."""
    return f"{{gw:q:{kind}:{len(user)}:{user}:{client_id}}}:rate"


def tier_manifest(topic: str, partition: int) -> str:
    """Sorted set of a partition's segments in tiered storage: member "base:next:max ts:bytes
    before:size:segment id", score = base offset (see lua/tier-add-2.lua)."""
    return f"{partition_tag(topic, partition)}:tier"


def log_aside(topic: str, partition: int) -> str:
    """Where a predicted append (append-check-6.lua) puts the stream for the XADD of its batch: only
    inside one MULTI, never there after it."""
    return f"{log(topic, partition)}:aside"
