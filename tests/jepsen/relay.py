"""A transparent TCP relay that delays what it forwards: the delay fault, since this kernel has no
sch_netem (`tc qdisc add ... netem` fails) and tbf only shapes a rate.

It runs in a gateway's network namespace, where the lab's nftables rule redirects every new connection
to a Redis or Sentinel port here; it finds where the connection was going with SO_ORIGINAL_DST and
connects there itself, its socket marked so that the redirect lets it pass. Each chunk read is written
on after the delay then in force (the integer in `--delay-file`, milliseconds, reread every 100 ms),
in order: a delayed TCP stream, as netem's delay looks to an application (TCP never shows it
reordering). Connections stay the gateway's own: a partition or a Redis that dies still reaches the
gateway, as a stalled or a closed connection.

    python -m tests.jepsen.relay --port 16379 --mark 74 --delay-file F
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import time
from pathlib import Path

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h


class Delay:
    """The delay in force, read from a file a fault writes; the relay says it took it in `<file>.seen`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = 0.0

    async def follow(self) -> None:
        while True:
            try:
                self.seconds = max(0, int(self.path.read_text().strip() or 0)) / 1000
            except (OSError, ValueError):
                self.seconds = 0.0
            seen = self.path.with_name(self.path.name + ".seen")
            if not seen.exists() or seen.read_text() != f"{self.seconds * 1000:.0f}":
                seen.write_text(f"{self.seconds * 1000:.0f}")
            await asyncio.sleep(0.1)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    """Copy one direction, each chunk held until its time: a queue keeps the order."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(send())
    try:
        while chunk := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay.seconds, chunk))
    except OSError:
        pass
    finally:
        queue.put_nowait((time.monotonic() + delay.seconds, b""))
    try:
        await sender
    except OSError:
        pass


async def relay(port: int, mark: int, delay: Delay) -> None:
    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        dport, = struct.unpack("!H", raw[2:4])
        dst = socket.inet_ntoa(raw[4:8])
        out = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        out.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
        out.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(out, (dst, dport))
            up_reader, up_writer = await asyncio.open_connection(sock=out)
        except OSError:
            out.close()
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer, delay), pump(up_reader, writer, delay))

    server = await asyncio.start_server(accepted, "0.0.0.0", port)
    asyncio.ensure_future(delay.follow())
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mark", type=int, required=True)
    parser.add_argument("--delay-file", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(relay(args.port, args.mark, Delay(args.delay_file)))


if __name__ == "__main__":
    main()
