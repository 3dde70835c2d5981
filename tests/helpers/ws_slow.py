#!/usr/bin/env python3
"""ws_slow.py: a client of Kyutai's WebSocket chat protocol that stops
reading, for the tests (Debian's python3-websockets, not our code, on a
socket whose receive buffer is small, with the library's own buffering
cut down): it reads the Handshake, then sends the Ogg Opus file as Audio
messages and never reads again, until its sends fail (the server dropped
it) or --timeout. Prints: handshake=1 dropped=1 after_s=S

usage: ws_slow.py URL IN.opus [--timeout S]
"""
import asyncio, socket, sys, time, argparse
from urllib.parse import urlparse
import websockets


async def run(a):
    u = urlparse(a.url)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((u.hostname, u.port))
    hs, dropped, t0 = 0, 0, time.monotonic()
    try:
        async with websockets.connect(a.url, sock=s, max_queue=1, read_limit=1024,
                                      write_limit=4096, ping_interval=None,
                                      open_timeout=10) as ws:
            msg = await asyncio.wait_for(ws.recv(), timeout=10)
            hs = int(isinstance(msg, bytes) and msg[:1] == b"\x00")
            t0 = time.monotonic()
            data = open(a.inp, "rb").read()
            while time.monotonic() - t0 < a.timeout:
                for i in range(0, len(data), 997):
                    await ws.send(b"\x01" + data[i:i + 997])
                    # about real time (a chunk holds 100 to 200 ms): the
                    # server refuses audio more than 10 s ahead of it
                    await asyncio.sleep(0.15)
                # then small pings, to see the drop (a send fails): their
                # pongs wait unread with the audio
                while time.monotonic() - t0 < a.timeout:
                    await ws.ping()
                    await asyncio.sleep(0.1)
    except (websockets.exceptions.ConnectionClosed, ConnectionError, OSError):
        dropped = 1
    print("handshake=%d dropped=%d after_s=%.1f" % (hs, dropped, time.monotonic() - t0))


p = argparse.ArgumentParser()
p.add_argument("url"); p.add_argument("inp")
p.add_argument("--timeout", type=float, default=40)
asyncio.run(run(p.parse_args()))
