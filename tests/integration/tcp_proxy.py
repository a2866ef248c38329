#!/usr/bin/python3
# A TCP forwarder for broker outages that touch no shared server: a test points a client at
# LISTEN_PORT, and killing this process is the outage (every connection through it breaks, new
# ones are refused); started again on the same port, the broker is back.
# Usage: tcp_proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def serve(target_host, target_port, client_reader, client_writer):
    try:
        up_reader, up_writer = await asyncio.open_connection(target_host, target_port)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, up_writer), pipe(up_reader, client_writer))


async def main():
    listen_port, target_host, target_port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    server = await asyncio.start_server(
        lambda r, w: serve(target_host, target_port, r, w), "127.0.0.1", listen_port,
        reuse_address=True)
    print(f"forwarding 127.0.0.1:{listen_port} to {target_host}:{target_port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: tcp_proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT")
    asyncio.run(main())
