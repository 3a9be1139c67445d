"""The kafka listener (being built: see the open issue)."""

from __future__ import annotations

import asyncio

from gateway.net import TcpListener
from gateway.services import Services


async def start_kafka_server(services: Services, host: str, port: int) -> TcpListener:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    return await TcpListener("kafka", handle).start(host, port)
