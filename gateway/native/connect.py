"""Connect (authentication, the transaction key's epoch) and Ping: all that is served before
authentication, when it is on. A failed authentication closes the connection after its answer."""

from __future__ import annotations

from gateway.domain.security import USER_PREFIX
from gateway.errors import AuthenticationFailed, InvalidRequest, NotAllowed
from gateway.formats.frames import PROTOCOL_VERSION
from gateway.native.dispatch import Session, handles
from gateway.pb import gateway_pb2 as pb


@handles("connect", before_connect=True)
async def connect(s: Session, req: pb.Request) -> pb.Response:
    r = req.connect
    epoch = 0
    if r.incarnation and not r.transaction_key:
        raise InvalidRequest("an incarnation is one of a transaction key")
    security = s.services.security
    if security.enabled and s.principal is None:
        s.closing = True  # unless this succeeds
        if r.token:
            s.principal = await security.check_token(r.token)
        elif r.username:
            s.principal = await security.check_password(r.username, r.password)
        else:
            raise AuthenticationFailed("this gateway wants a user name and password, or a token")
        s.closing = False
        s.txns.owner = s.principal.removeprefix(USER_PREFIX)
    if r.transaction_key:
        if s.txns.key:
            raise NotAllowed("this connection holds a transaction key already")
        epoch = await s.txns.connect(r.transaction_key, r.epoch, s.on_fenced, r.incarnation)
    cfg = s.services.config
    connected = pb.Connected(
        protocol_version=PROTOCOL_VERSION, max_frame_bytes=cfg.max_frame_bytes, epoch=epoch,
        idle_timeout_ms=int(cfg.idle_timeout * 1000), principal=s.principal or "",
    )
    return pb.Response(connected=connected)


@handles("ping", before_connect=True)
async def ping(s: Session, req: pb.Request) -> pb.Response:
    return pb.Response(pong=pb.Pong())
