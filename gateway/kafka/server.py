"""The Kafka listener: a TCP server whose connections speak the Kafka protocol."""

from __future__ import annotations

import asyncio

from gateway.kafka import connection
from gateway.kafka.dispatch import load_handlers
from gateway.net import TcpListener
from gateway.services import Services


async def start_kafka_server(services: Services, host: str, port: int) -> TcpListener:
    """Listen for Kafka clients; every API module registers itself before the first connection."""
    load_handlers()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await connection.serve(services, reader, writer)

    return await TcpListener("kafka", handle).start(host, port)
