"""One HTTP listener of an aiohttp application (the admin API's, the Schema Registry's), behind TLS
when the gateway has a certificate."""

from __future__ import annotations

import asyncio
from typing import cast

from aiohttp import web

from gateway.config import Config
from gateway.net import server_ssl_context


class HttpListener:
    def __init__(self, runner: web.AppRunner, site: web.TCPSite) -> None:
        self.runner = runner
        self.site = site
        server = cast("asyncio.Server | None", site._server)  # aiohttp declares the AbstractServer
        assert server is not None and server.sockets
        self.port = int(server.sockets[0].getsockname()[1])

    async def close(self, grace: float = 5.0) -> None:
        await self.runner.cleanup()


async def listen(app: web.Application, cfg: Config, host: str, port: int) -> HttpListener:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=server_ssl_context(cfg.tls_cert_file, cfg.tls_key_file))
        await site.start()
    except BaseException:
        await runner.cleanup()  # a port in use: the gateway stops, and nothing of this listener stays
        raise
    return HttpListener(runner, site)
