"""Who a client is and what it may do: users, tokens, SASL exchanges and ACLs, for every face.

Passwords are never stored. A user has, per SCRAM mechanism, a salt, an iteration count and the
StoredKey and ServerKey of RFC 5802 (Kafka's own record); PLAIN and HTTP basic auth check a
password against them, SCRAM-SHA-256/512 (RFC 5802, 7677) prove it without sending it. A token is
a random secret kept as its SHA-256 digest. An unknown user goes through the same steps as a known
one with a wrong password, so answers and timing do not tell which names exist.

With authentication on, a principal may do what an ACL allows it and nothing else (super users
everything). The ACLs are Kafka's: an operation (Kafka's, or `admin` for the five that administer
a resource) allowed or denied to a principal from a host ("*": any) on a topic, group,
transactional id, delegation token, user or the cluster, by literal name ("*": any) or by prefix.
A DENY that matches wins; an ALLOW of read, write, delete or alter implies describe, one of
alter-configs describe-configs (Kafka's StandardAuthorizerData.findResult). The HTTP API and the
Kafka face (CreateAcls, DescribeAcls, DeleteAcls) edit the same set. ACLs are read from Redis at
most every `cache_seconds`, and each decision is remembered until then, so a request pays a dict
lookup. Changes made through this gateway apply at once, through another gateway within
`cache_seconds`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gateway.clock import now_ms
from gateway.domain.delegation_tokens import DelegationTokens
from gateway.errors import AuthenticationFailed, GatewayError, InvalidRequest, NotAllowed
from gateway.store import Store
from gateway.store.security import AclEntry, UserRecord

log = logging.getLogger(__name__)

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = ("PLAIN", *SCRAM_HASHES)
MIN_ITERATIONS = 4096  # RFC 7677's minimum, and Kafka's
USER_PREFIX = "User:"
ANY = "*"
CLUSTER_NAME = "kafka-cluster"
ADMIN_TOKEN_PRINCIPAL = "User:admin-token"  # who the configured admin token authenticates as: a super user
_MAX_DECISIONS = 100_000
FAILED_AUTHENTICATION_DELAY = 0.1  # seconds between a failed authentication's answer and the close, as
# Kafka's connection.failed.authentication.delay.ms: clients read the answer first, guessers wait


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"  # a Kafka consumer group or a native subscription
    TRANSACTIONAL_ID = "transactional-id"
    CLUSTER = "cluster"
    DELEGATION_TOKEN = "delegation-token"
    USER = "user"


class Operation(StrEnum):
    """Kafka's ACL operations, plus `admin`: the admin API's name for what administers a resource
    (create, delete, alter, alter-configs, describe-configs). An ACL for admin is stored as those
    five; asking whether a principal may `admin` asks for all five."""

    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    CLUSTER_ACTION = "cluster-action"
    DESCRIBE_CONFIGS = "describe-configs"
    ALTER_CONFIGS = "alter-configs"
    IDEMPOTENT_WRITE = "idempotent-write"
    CREATE_TOKENS = "create-tokens"
    DESCRIBE_TOKENS = "describe-tokens"
    TWO_PHASE_COMMIT = "two-phase-commit"
    ADMIN = "admin"


class PatternType(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Permission(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


ADMIN_OPERATIONS = (Operation.CREATE, Operation.DELETE, Operation.ALTER, Operation.ALTER_CONFIGS,
                    Operation.DESCRIBE_CONFIGS)

# What an ALLOW grants besides its own operation (StandardAuthorizerData's IMPLIES_DESCRIBE and
# IMPLIES_DESCRIBE_CONFIGS); a DENY denies its own operation only, or everything for ALL.
_IMPLIED_BY_ALLOW = {
    Operation.READ: Operation.DESCRIBE, Operation.WRITE: Operation.DESCRIBE, Operation.DELETE: Operation.DESCRIBE,
    Operation.ALTER: Operation.DESCRIBE, Operation.ALTER_CONFIGS: Operation.DESCRIBE_CONFIGS,
}

SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    # what each resource type has (Kafka's AclEntry.supportedOperations): the operations reported
    # as authorized (KIP-430), and with authentication off all of them
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


def user_principal(name: str) -> str:
    return USER_PREFIX + name


def _valid_host(host: str) -> bool:
    if host == ANY:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Acl:
    """Allows (or denies) `principal` ("User:alice", "User:*" for every authenticated user)
    `operation` on the resources of a type whose name is `resource_name` ("*": any) or starts with
    it (prefixed), from `host` ("*": anywhere)."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    operation: Operation
    pattern: PatternType = PatternType.LITERAL
    host: str = ANY
    permission: Permission = Permission.ALLOW

    def __post_init__(self) -> None:  # plain strings become the enums (ValueError for unknown ones)
        object.__setattr__(self, "resource_type", ResourceType(self.resource_type))
        object.__setattr__(self, "operation", Operation(self.operation))
        object.__setattr__(self, "pattern", PatternType(self.pattern))
        object.__setattr__(self, "permission", Permission(self.permission))

    @classmethod
    def parse(cls, values: dict[str, Any]) -> Acl:
        """From a JSON object; anything missing or unknown is an InvalidRequest."""
        try:
            acl = cls(
                str(values["principal"]),
                values["resource_type"],
                str(values.get("resource_name", CLUSTER_NAME if values["resource_type"] == "cluster" else "")),
                values["operation"],
                values.get("pattern", PatternType.LITERAL),
                str(values.get("host", ANY)),
                values.get("permission", Permission.ALLOW),
            )
        except (KeyError, ValueError) as exc:
            raise InvalidRequest(
                f"an ACL needs principal, resource_type ({', '.join(ResourceType)}), resource_name, operation "
                f"({', '.join(Operation)}) and optionally pattern ({', '.join(PatternType)}), host (* or an IP "
                f"address) and permission ({', '.join(Permission)}): {exc}"
            ) from None
        acl.validate()
        return acl

    def validate(self) -> None:
        """InvalidRequest for what no request may store (Kafka's AclControlManager.validateNewAcl and
        AclApis: a non-empty name, the cluster's own name)."""
        if not self.principal.startswith(USER_PREFIX) or self.principal == USER_PREFIX:
            raise InvalidRequest(f"a principal looks like User:NAME (or User:*), not {self.principal!r}")
        if not self.resource_name:
            raise InvalidRequest("the resource name may not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidRequest(f"the only valid name for the cluster resource is {CLUSTER_NAME}")
        if not _valid_host(self.host):
            raise InvalidRequest(f"a host is * or an IP address, not {self.host!r}")

    def to_json(self) -> dict[str, str]:
        """The admin API's form; host and permission only when they are not `*` and `allow`."""
        out = {"principal": self.principal, "resource_type": self.resource_type.value,
               "resource_name": self.resource_name, "pattern": self.pattern.value, "operation": self.operation.value}
        if self.host != ANY:
            out["host"] = self.host
        if self.permission != Permission.ALLOW:
            out["permission"] = self.permission.value
        return out

    def entry(self) -> AclEntry:
        """As stored: the first five fields alone for an ALLOW from any host (the form ACLs had
        before hosts and DENY existed, so those entries stay the same members of the set)."""
        head = (self.principal, self.resource_type.value, self.pattern.value, self.resource_name,
                self.operation.value)
        if self.host == ANY and self.permission == Permission.ALLOW:
            return head
        return (*head, self.host, self.permission.value)

    @classmethod
    def from_entry(cls, e: AclEntry) -> Acl:
        extra = (e[5], e[6]) if len(e) >= 7 else ()
        return cls(e[0], ResourceType(e[1]), e[3], Operation(e[4]), PatternType(e[2]), *extra)  # ValueError if unknown

    def expand(self) -> list[Acl]:
        """The Kafka ACLs this one stands for: itself, or one per operation of `admin`."""
        if self.operation != Operation.ADMIN:
            return [self]
        return [replace(self, operation=op) for op in ADMIN_OPERATIONS]

    def covers(self, resource: ResourceType, name: str) -> bool:
        """Whether this ACL's pattern matches the resource (a literal "*" matches every name)."""
        if resource != self.resource_type:
            return False
        if self.pattern == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, ANY)

    def decides(self, host: str | None, operation: Operation) -> Permission | None:
        """What this ACL says about `operation` from `host` (resource and principal matched), as
        Kafka's StandardAuthorizerData.findResult: None when it says nothing. An unknown host
        (None) meets only the ACLs for any host, except DENYs, which hold for every host then."""
        if self.host != ANY and self.host != host and not (host is None and self.permission == Permission.DENY):
            return None
        if self.operation in (Operation.ALL, operation):
            return self.permission
        if self.permission == Permission.ALLOW and _IMPLIED_BY_ALLOW.get(self.operation) == operation:
            return self.permission
        return None


@dataclass(frozen=True)
class AclFilter:
    """Which ACLs a describe or delete means (Kafka's AclBindingFilter): None for any value; the
    pattern `match` finds every ACL that applies to the named resource (literal, "*" or a prefix
    of it), `any` every ACL whatever its pattern, with the name as given."""

    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern: str = "any"  # literal, prefixed, match, any
    principal: str | None = None
    host: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    def matches(self, acl: Acl) -> bool:
        """ResourcePatternFilter.matches and AccessControlEntryFilter.matches together."""
        if self.resource_type is not None and self.resource_type != acl.resource_type:
            return False
        if self.pattern not in ("any", "match") and self.pattern != acl.pattern:
            return False
        if self.resource_name is not None:
            if self.pattern in ("any", acl.pattern.value):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern == PatternType.LITERAL:
                if acl.resource_name not in (self.resource_name, ANY):
                    return False
            elif not self.resource_name.startswith(acl.resource_name):
                return False
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation is None or self.operation == acl.operation)
                and (self.permission is None or self.permission == acl.permission))


# -- SCRAM (RFC 5802) ----------------------------------------------------------------------------


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def create(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
        salt = secrets.token_bytes(24)
        salted = hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)
        return cls.from_salted(mechanism, salt, salted, iterations)

    @classmethod
    def from_salted(cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
        """From SaltedPassword = Hi(password, salt, iterations), what a client sends in Kafka's
        AlterUserScramCredentials: the password itself never travels."""
        hash_name = SCRAM_HASHES[mechanism]
        client_key = _hmac(hash_name, salted_password, b"Client Key")
        return cls(salt, iterations, hashlib.new(hash_name, client_key).digest(),
                   _hmac(hash_name, salted_password, b"Server Key"))

    def format(self) -> str:
        """Kafka's text form of a SCRAM credential."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        f = dict(part.split("=", 1) for part in text.split(","))
        return cls(base64.b64decode(f["salt"]), int(f["iterations"]), base64.b64decode(f["stored_key"]),
                   base64.b64decode(f["server_key"]))

    def check_password(self, mechanism: str, password: str) -> bool:
        """Whether `password` derives this credential's StoredKey (costs `iterations` HMACs)."""
        hash_name = SCRAM_HASHES[mechanism]
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), self.salt, self.iterations)
        stored = hashlib.new(hash_name, _hmac(hash_name, salted, b"Client Key")).digest()
        return hmac.compare_digest(stored, self.stored_key)


_SECRET = secrets.token_bytes(32)  # per process: the fake credentials of unknown users


def _stand_in(name: str, mechanism: str) -> ScramCredential:
    """What an unknown user gets instead of an error: the same salt every time, no password fits."""
    digest = _hmac("sha256", _SECRET, f"{mechanism}\0{name}".encode())
    return ScramCredential(digest[:24], MIN_ITERATIONS, secrets.token_bytes(32), secrets.token_bytes(32))


def _sasl_name(raw: str) -> str:
    """RFC 5802's saslname: '=2C' and '=3D' stand for ',' and '='; any other '=' is malformed."""
    if re.search(r"=(?!2C|3D)", raw):
        raise AuthenticationFailed("malformed SCRAM user name")
    return raw.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise AuthenticationFailed("malformed SCRAM message")
        out.setdefault(key, value)
    return out


class ScramExchange:
    """The server side of one SCRAM authentication: two messages in, two out."""

    def __init__(self, service: SecurityService, mechanism: str) -> None:
        self.service = service
        self.mechanism = mechanism
        self.hash_name = SCRAM_HASHES[mechanism]
        self.principal: str | None = None
        self.token_authenticated = False
        self._owner = ""  # a token's owner, who a token login authenticates
        self._user = ""
        self._known = False
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._gs2_header = ""
        self._first_bare = ""
        self._server_first = ""

    async def step(self, message: bytes) -> bytes:
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("a SCRAM message is UTF-8") from None
        if self._credential is None:
            return await self._first(text)
        return self._final(text)

    async def _first(self, text: str) -> bytes:
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise AuthenticationFailed("SCRAM channel binding is not supported")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or "m" in attrs or not attrs["r"]:
            raise AuthenticationFailed("malformed SCRAM client-first message")
        self._user = _sasl_name(attrs["n"])
        if authzid and _sasl_name(authzid.removeprefix("a=")) != self._user:
            raise AuthenticationFailed("the authorization id must be the user name")
        if attrs.get("tokenauth") == "true":
            await self._token_credential()
        else:
            record = await self.service.store.get_user(self._user)
            stored = record.credentials.get(self.mechanism) if record is not None else None
            self._known = stored is not None
            self._credential = ScramCredential.parse(stored) if stored else _stand_in(self._user, self.mechanism)
        self._gs2_header = f"{flag},{authzid},"
        self._first_bare = bare
        assert self._credential is not None
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode()

    async def _token_credential(self) -> None:
        """A delegation token's login (KIP-48's `tokenauth` extension): the user name is the token's
        id, the password its HMAC; the principal is the token's owner, marked token-authenticated."""
        tokens = self.service.delegation_tokens
        found = await tokens.login(self._user) if tokens is not None else None
        self._known = found is not None
        if found is None:
            self._credential = _stand_in(self._user, self.mechanism)
            return
        self._owner, password = found
        self.token_authenticated = True
        self._credential = await asyncio.to_thread(ScramCredential.create, self.mechanism, password)

    def _final(self, text: str) -> bytes:
        if self.principal is not None:
            raise AuthenticationFailed("the SCRAM exchange is over")
        assert self._credential is not None
        without_proof, sep, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not sep or attrs.get("r") != self._nonce:
            raise AuthenticationFailed("malformed SCRAM client-final message")
        if base64.b64decode(attrs.get("c", "")) != self._gs2_header.encode():
            raise AuthenticationFailed("SCRAM channel binding does not match")
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthenticationFailed("malformed SCRAM proof") from None
        cred = self._credential
        signature = _hmac(self.hash_name, cred.stored_key, auth)
        if len(proof) != len(signature):
            raise AuthenticationFailed("malformed SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        valid = hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(), cred.stored_key)
        if not (valid and self._known):
            # Kafka's SaslServerAuthenticator.handleSaslToken answers a SCRAM mechanism's failure with a
            # message that names only the mechanism, so as to tell nothing of the user
            raise AuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}")
        self.principal = self._owner or user_principal(self._user)
        return b"v=" + base64.b64encode(_hmac(self.hash_name, cred.server_key, auth))


class PlainExchange:
    """SASL PLAIN: one message, "authzid NUL user NUL password", checked against the stored keys."""

    def __init__(self, service: SecurityService) -> None:
        self.service = service
        self.principal: str | None = None
        self.token_authenticated = False

    async def step(self, message: bytes) -> bytes:
        parts = message.split(b"\0")
        if len(parts) != 3 or self.principal is not None:
            raise AuthenticationFailed("malformed SASL PLAIN message")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SASL PLAIN message") from None
        if authzid and authzid != user:
            raise AuthenticationFailed("the authorization id must be the user name")
        self.principal = await self.service.check_password(user, password)
        return b""


SaslExchange = ScramExchange | PlainExchange


@dataclass(frozen=True)
class UserInfo:
    name: str
    mechanisms: list[str]
    tokens: dict[str, int]  # id -> created ms
    created_ms: int

    @classmethod
    def of(cls, r: UserRecord) -> UserInfo:
        return cls(r.name, sorted(r.credentials), r.tokens, r.created_ms)


def validate_user_name(name: str) -> None:
    if not name or len(name) > 255 or any(ord(c) < 32 for c in name):
        raise InvalidRequest("a user name is 1-255 characters, none of them control characters")


class SecurityService:
    """Authentication and authorization for every face; off (everything allowed) unless enabled."""

    def __init__(
        self,
        store: Store,
        *,
        enabled: bool = False,
        mechanisms: Iterable[str] = MECHANISMS,
        super_users: Iterable[str] = (),
        admin_token: str = "",
        cache_seconds: float = 2.0,
        delegation_tokens: DelegationTokens | None = None,
    ) -> None:
        self.store = store.security
        self.delegation_tokens = delegation_tokens
        self.enabled = enabled
        self.mechanisms = [m.strip() for m in mechanisms if m.strip()]
        unknown = set(self.mechanisms) - set(MECHANISMS)
        if unknown:
            raise InvalidRequest(f"unknown SASL mechanisms {sorted(unknown)}; known: {', '.join(MECHANISMS)}")
        names = [u.strip() for u in super_users if u.strip()]
        self.super_users = {u if u.startswith(USER_PREFIX) else user_principal(u) for u in names}
        self.super_users.add(ADMIN_TOKEN_PRINCIPAL)
        self.admin_token = admin_token
        self.cache_seconds = cache_seconds
        self._acls: dict[str, list[Acl]] = {}  # by principal
        self._decisions: dict[tuple[str, str | None, ResourceType, str, Operation], bool] = {}
        self._expires = 0.0
        self._loaded = False
        self._generation = 0  # ACL changes made through this gateway

    # -- authentication --------------------------------------------------------------------------

    def sasl(self, mechanism: str) -> SaslExchange:
        """A new exchange for an enabled mechanism (NotAllowed for any other)."""
        if mechanism not in self.mechanisms:
            raise NotAllowed(f"SASL mechanism {mechanism!r} is not enabled; enabled: {', '.join(self.mechanisms)}")
        return PlainExchange(self) if mechanism == "PLAIN" else ScramExchange(self, mechanism)

    async def check_password(self, user: str, password: str) -> str:
        """The principal of a user whose password this is; AuthenticationFailed otherwise."""
        record = await self.store.get_user(user)
        creds = record.credentials if record is not None else {}
        mechanism = next((m for m in SCRAM_HASHES if m in creds), "SCRAM-SHA-256")
        cred = ScramCredential.parse(creds[mechanism]) if creds else _stand_in(user, mechanism)
        ok = await asyncio.to_thread(cred.check_password, mechanism, password)
        if not (ok and creds):
            raise AuthenticationFailed("invalid user name or password")
        return user_principal(user)

    async def check_token(self, token: str) -> str:
        """The principal a token authenticates; AuthenticationFailed for a token nobody has."""
        if self.admin_token and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return ADMIN_TOKEN_PRINCIPAL
        owner = await self.store.token_owner(_digest(token))
        if owner is None:
            raise AuthenticationFailed("invalid token")
        return user_principal(owner)

    # -- authorization ---------------------------------------------------------------------------

    async def authorize(
        self, principal: str | None, resource: ResourceType, name: str, operation: Operation, host: str | None = None
    ) -> bool:
        """Whether `principal`, connected from `host` (None: unknown), may; always with
        authentication off, never for no principal. A DENY that matches wins over any ALLOW."""
        if not self.enabled:
            return True
        if principal is None:
            return False
        if principal in self.super_users:
            return True
        if time.monotonic() >= self._expires:
            await self._reload()
        key = (principal, host, resource, name, operation)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) >= _MAX_DECISIONS:
                self._decisions.clear()
            if operation == Operation.ADMIN:
                decision = all([self._decide(principal, host, resource, name, op) for op in ADMIN_OPERATIONS])
            else:
                decision = self._decide(principal, host, resource, name, operation)
            self._decisions[key] = decision
        return decision

    def _decide(self, principal: str, host: str | None, resource: ResourceType, name: str, operation: Operation) -> bool:
        allowed = False
        for acl in (*self._acls.get(principal, ()), *self._acls.get(USER_PREFIX + ANY, ())):
            if acl.covers(resource, name):
                said = acl.decides(host, operation)
                if said == Permission.DENY:
                    return False
                allowed = allowed or said == Permission.ALLOW
        return allowed

    async def authorize_by_resource_type(
        self, principal: str | None, resource: ResourceType, operation: Operation, host: str | None = None
    ) -> bool:
        """Whether the principal may do `operation` on some resource of the type: Kafka's
        Authorizer.authorizeByResourceType as DefaultResourceTypeBasedAuthorization implements it
        (KIP-679, an idempotent producer's WRITE on any topic). An
        ALLOW counts unless a DENY covers all it allows: a wildcard DENY, a literal DENY of its
        literal name, a prefixed DENY of a prefix of its name; a literal "*" ALLOW counts always."""
        if await self.authorize(principal, resource, "hardcode", operation, host):  # super users, as Kafka
            return True
        if principal is None:
            return False
        allows: set[tuple[PatternType, str]] = set()
        denied: set[tuple[PatternType, str]] = set()
        for acl in (*self._acls.get(principal, ()), *self._acls.get(USER_PREFIX + ANY, ())):
            if (acl.resource_type != resource or acl.host not in (ANY, host)
                    or acl.operation not in (Operation.ALL, operation)):
                continue
            if acl.permission == Permission.DENY:
                if acl.pattern == PatternType.LITERAL and acl.resource_name == ANY:
                    return False
                denied.add((acl.pattern, acl.resource_name))
            else:
                allows.add((acl.pattern, acl.resource_name))
        if (PatternType.LITERAL, ANY) in allows:
            return True
        return any(
            not (pattern == PatternType.LITERAL and (PatternType.LITERAL, name) in denied)
            and not any((PatternType.PREFIXED, name[:i]) in denied for i in range(1, len(name) + 1))
            for pattern, name in allows)

    async def authorized_operations(
        self, principal: str | None, resource: ResourceType, name: str, host: str | None = None
    ) -> list[Operation]:
        """The operations of the resource's type the principal may do on it (KIP-430): every one with
        authentication off or for a super user, as Kafka reports them."""
        return [op for op in SUPPORTED_OPERATIONS[resource] if await self.authorize(principal, resource, name, op, host)]

    async def _reload(self) -> None:
        """Read the ACLs again; while Redis is away the last ones read stay in force (none: deny).
        A read that an ACL change through this gateway overtook is used once, not trusted for the
        cache's lifetime: the change may have landed after Redis answered it."""
        generation = self._generation
        try:
            entries = await self.store.acls()
        except GatewayError as exc:
            log.warning("cannot read ACLs (%s); %s", exc, "keeping the last ones" if self._loaded else "denying")
            self._expires = time.monotonic() + min(self.cache_seconds, 1.0)
            return
        by_principal: dict[str, list[Acl]] = {}
        for acl in _parse_entries(entries).values():
            for one in acl.expand():
                by_principal.setdefault(one.principal, []).append(one)
        self._acls = by_principal
        self._decisions = {}
        self._loaded = True
        self._expires = time.monotonic() + self.cache_seconds if generation == self._generation else 0.0

    def _changed(self) -> None:
        self._generation += 1
        self._expires = 0.0

    # -- administration --------------------------------------------------------------------------

    async def set_user(
        self, name: str, password: str | None, mechanisms: Iterable[str] = tuple(SCRAM_HASHES),
        iterations: int = MIN_ITERATIONS,
    ) -> bool:
        """Create the user or set its password (None: token-only user); True when created."""
        validate_user_name(name)
        mechs = list(mechanisms)
        if any(m not in SCRAM_HASHES for m in mechs) or not mechs:
            raise InvalidRequest(f"mechanisms are some of {', '.join(SCRAM_HASHES)}")
        if iterations < MIN_ITERATIONS:
            raise InvalidRequest(f"at least {MIN_ITERATIONS} iterations")
        creds: dict[str, str] = {}
        if password is not None:
            if not password:
                raise InvalidRequest("an empty password")
            for m in mechs:
                creds[m] = (await asyncio.to_thread(ScramCredential.create, m, password, iterations)).format()
        return await self.store.set_user(name, creds, now_ms())

    async def delete_user(self, name: str) -> bool:
        return await self.store.delete_user(name)

    async def users(self) -> list[UserInfo]:
        out = []
        for name in await self.store.user_names():
            record = await self.store.get_user(name)
            if record is not None:
                out.append(UserInfo.of(record))
        return out

    async def user(self, name: str) -> UserInfo | None:
        record = await self.store.get_user(name)
        return UserInfo.of(record) if record is not None else None

    async def create_token(self, name: str) -> tuple[str, str]:
        """(id, token) for the user; the token is shown this once, only its digest is kept."""
        token_id = secrets.token_hex(6)
        token = secrets.token_urlsafe(32)
        if not await self.store.add_token(name, token_id, _digest(token), now_ms()):
            raise InvalidRequest(f"no user {name!r}")
        return token_id, token

    async def delete_token(self, name: str, token_id: str) -> bool:
        return await self.store.delete_token(name, token_id)

    async def set_credential(self, name: str, mechanism: str, credential: ScramCredential) -> None:
        """Set one SCRAM credential of a user, creating the user if need be (Kafka's upsertion)."""
        validate_user_name(name)
        await self.store.set_credential(name, mechanism, credential.format(), now_ms())

    async def delete_credential(self, name: str, mechanism: str) -> bool:
        """Remove one SCRAM credential of a user (the user and its tokens stay); False when it had none."""
        return await self.store.delete_credential(name, mechanism)

    async def credentials(self, name: str) -> dict[str, int]:
        """The user's SCRAM mechanisms with their iteration counts ({} for no user or none)."""
        record = await self.store.get_user(name)
        if record is None:
            return {}
        return {m: ScramCredential.parse(c).iterations for m, c in sorted(record.credentials.items())}

    async def acls(self, principal: str | None = None, acl_filter: AclFilter | None = None) -> list[Acl]:
        """Stored ACLs (an `admin` one from before ACLs were kept per Kafka operation counts as its
        five operations), of one principal or those a filter matches."""
        found = [one for acl in _parse_entries(await self.store.acls()).values() for one in acl.expand()]
        return sorted((a for a in found if (principal is None or a.principal == principal)
                       and (acl_filter is None or acl_filter.matches(a))),
                      key=lambda a: (a.principal, a.resource_type, a.resource_name, a.pattern, a.operation, a.host,
                                     a.permission))

    async def add_acl(self, acl: Acl) -> bool:
        """Store the ACL (`admin`: its five operations); True when something was new."""
        return any(await self.create_acls(acl.expand()))

    async def create_acls(self, acls: list[Acl]) -> list[bool]:
        """Store ACLs of Kafka operations in one step; per ACL, whether it was new."""
        _, added = await self.store.change_acls([], [a.entry() for a in acls])
        self._changed()
        return added

    async def remove_acl(self, acl: Acl) -> bool:
        """Remove the ACL (`admin`: its five operations, and an `admin` entry stored as such)."""
        wanted = set(acl.expand())
        stored = _parse_entries(await self.store.acls())
        gone = [e for e, a in stored.items() if a == acl or set(a.expand()) & wanted]
        keep = [one.entry() for e in gone for one in stored[e].expand() if one not in wanted]
        removed, _ = await self.store.change_acls(gone, keep)
        self._changed()
        return any(removed)

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[Acl]]:
        """Delete the ACLs each filter matches, all in one step (Kafka's DeleteAcls); per filter,
        the ACLs it deleted. An `admin` entry stored as such is split: what no filter matched stays."""
        stored = _parse_entries(await self.store.acls())
        matched: list[list[tuple[AclEntry, Acl]]] = [
            [(e, one) for e, acl in stored.items() for one in acl.expand() if f.matches(one)] for f in filters
        ]
        hit = {one for found in matched for _, one in found}
        gone = sorted({e for found in matched for e, _ in found})
        keep = [one.entry() for e in gone for one in stored[e].expand() if one not in hit]
        removed, _ = await self.store.change_acls(gone, keep)
        self._changed()
        really = {e for e, r in zip(gone, removed, strict=True) if r}
        return [[one for e, one in found if e in really] for found in matched]


def _parse_entries(entries: list[AclEntry]) -> dict[AclEntry, Acl]:
    """The stored entries that make ACLs this gateway knows (others, from a newer one, are skipped)."""
    out: dict[AclEntry, Acl] = {}
    for e in entries:
        try:
            out[e] = Acl.from_entry(e)
        except (ValueError, IndexError, TypeError):
            continue
    return out


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
