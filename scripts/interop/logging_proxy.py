"""A TCP proxy that writes down everything a server receives, for the tests that must show
what reached it (and what did not): every byte a client sends is appended to LOG_FILE as it
passes, then forwarded unchanged; the server's bytes go back unchanged and are not logged.
So the log holds each HTTP request whole, as the server got it: method, path, headers, body.

Usage: logging_proxy.py LOG_FILE TARGET_HOST:PORT
Prints `logging-proxy: http://127.0.0.1:PORT` on stdout once listening on a free port.
"""
import asyncio
import sys


async def pipe(reader, writer, log=None):
    try:
        while data := await reader.read(65536):
            if log is not None:
                log.write(data)
                log.flush()
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    log = open(sys.argv[1], "ab")
    host, port = sys.argv[2].rsplit(":", 1)

    async def connected(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, log),
            pipe(server_reader, client_writer),
        )

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    print(f"logging-proxy: http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
