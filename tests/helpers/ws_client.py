#!/usr/bin/env python3
"""ws_client.py: a client of Kyutai's WebSocket chat protocol for the
tests, written with Debian's python3-websockets (not our code): sends an
Ogg Opus file (made by opusenc) as Audio messages in chunks of any size,
collects what comes back, and prints one line of facts:

  handshake_first=1 handshake=VER,MODEL audio_msgs=N pages=N granule=G
  errors="..." close=CODE text=N text_early=N text_bad=N

--text FILE: each Text message a line "0 SEQ TEXT" as mt-replay -t writes
them (SEQ: the audio pages back before it, less one; a backslash and the
bytes below 0x20 and 0x7f escaped); text_early counts those before the
handshake, text_bad those not UTF-8.

usage: ws_client.py URL IN.opus OUT.opus [--frames N] [--chunk BYTES]
       [--header K=V] [--timeout S] [--no-send] [--eager] [--text FILE]
       [--drain S] [--realtime]
--frames: stop once N audio pages (after the header pages) came back
(then --drain: read Text messages S seconds more).
"""
import asyncio, struct, sys, argparse
try:
    import websockets
except ImportError:
    # a python3 that is not Debian's (pyenv, a venv) lacks Debian's module
    sys.exit("ws_client.py: this python3 (%s) has no 'websockets' module: run it "
             "with Debian's /usr/bin/python3 (package python3-websockets, "
             "installed by make deps), or pip install websockets" % sys.executable)


def pages(data):
    """(granule, header_type) of each Ogg page in data"""
    out, i = [], 0
    while i + 27 <= len(data):
        if data[i:i + 4] != b"OggS":
            break
        htype = data[i + 5]
        gran = struct.unpack_from("<q", data, i + 6)[0]
        nseg = data[i + 26]
        segs = data[i + 27:i + 27 + nseg]
        i += 27 + nseg + sum(segs)
        out.append((gran, htype))
    return out


def page_spans(data):
    """(start, end, granule) of each Ogg page in data"""
    out, i = [], 0
    while i + 27 <= len(data) and data[i:i + 4] == b"OggS":
        nseg = data[i + 26]
        end = i + 27 + nseg + sum(data[i + 27:i + 27 + nseg])
        out.append((i, end, struct.unpack_from("<q", data, i + 6)[0]))
        i = end
    return out


async def run(a):
    hdrs = dict(kv.split("=", 1) for kv in a.header)
    facts = {"handshake_first": 0, "handshake": "", "audio_msgs": 0, "errors": "",
             "close": "", "first": ""}
    got = bytearray()
    texts, text_early, text_bad, seen_hs = [], 0, 0, False
    try:
        async with websockets.connect(a.url, extra_headers=hdrs, max_size=None,
                                      open_timeout=a.timeout) as ws:
            n_msgs = 0

            async def sender():
                if a.no_send:
                    return
                data = open(a.inp, "rb").read()
                try:
                    if a.realtime:   # one page a message, when its audio is due
                        t0 = asyncio.get_event_loop().time()
                        for off, end, gran in page_spans(data):
                            due = t0 + max(gran, 0) / 48000.0 - 0.1
                            now = asyncio.get_event_loop().time()
                            if due > now:
                                await asyncio.sleep(due - now)
                            await ws.send(b"\x01" + data[off:end])
                        return
                    for i in range(0, len(data), a.chunk):
                        await ws.send(b"\x01" + data[i:i + a.chunk])
                        await asyncio.sleep(0.001)
                except websockets.exceptions.ConnectionClosed:
                    pass   # the server ended it first: the receiver says why

            send_task = asyncio.ensure_future(sender()) if a.eager else None
            while True:
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout=a.timeout)
                except asyncio.TimeoutError:
                    facts["errors"] += "timeout;"
                    break
                if isinstance(msg, str):
                    continue
                n_msgs += 1
                kind = msg[0] if msg else -1
                if n_msgs == 1:
                    facts["first"] = str(kind)
                if kind == 0:
                    seen_hs = True
                    facts["handshake_first"] = int(n_msgs == 1)
                    if len(msg) >= 9:
                        facts["handshake"] = "%d,%d" % struct.unpack_from("<II", msg, 1)
                    if send_task is None:
                        send_task = asyncio.ensure_future(sender())
                elif kind == 1:
                    facts["audio_msgs"] += 1
                    got.extend(msg[1:])
                    if a.frames and len([p for p in pages(bytes(got)) if p[0] > 0]) >= a.frames:
                        break
                elif kind == 2:
                    text_early += not seen_hs
                    try:
                        t = msg[1:].decode("utf-8")
                    except UnicodeDecodeError:
                        text_bad += 1
                        continue
                    seq = len([p for p in pages(bytes(got)) if p[0] > 0]) - 1
                    texts.append((max(seq, 0), t))
                elif kind == 5:
                    facts["errors"] += msg[1:].decode("utf-8", "replace") + ";"
            # the text of the last frames follows their audio
            end = asyncio.get_event_loop().time() + a.drain
            while a.drain > 0:
                left = end - asyncio.get_event_loop().time()
                if left <= 0:
                    break
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout=left)
                except asyncio.TimeoutError:
                    break
                if isinstance(msg, bytes) and msg[:1] == b"\x02":
                    try:
                        texts.append((len([p for p in pages(bytes(got)) if p[0] > 0]) - 1,
                                      msg[1:].decode("utf-8")))
                    except UnicodeDecodeError:
                        text_bad += 1
            await ws.close()
            facts["close"] = str(ws.close_code)
    except websockets.exceptions.ConnectionClosed as e:
        facts["close"] = str(e.code)
    except websockets.exceptions.InvalidStatusCode as e:
        facts["close"] = "http%d" % e.status_code
    except Exception as e:
        facts["errors"] += "%s: %s;" % (type(e).__name__, e)
    open(a.out, "wb").write(bytes(got))
    if a.text:
        def esc(t):
            return "".join("\\\\" if c == "\\" else "\\x%02x" % ord(c)
                           if ord(c) < 0x20 or ord(c) == 0x7f else c for c in t)
        with open(a.text, "w", encoding="utf-8") as f:
            for seq, t in texts:
                if t:
                    f.write("0 %d %s\n" % (seq, esc(t)))
    ps = pages(bytes(got))
    audio = [p for p in ps if p[0] > 0]
    print("handshake_first=%d handshake=%s first=%s audio_msgs=%d pages=%d granule=%d "
          "monotone=%d errors=\"%s\" close=%s text=%d text_early=%d text_bad=%d" % (
              facts["handshake_first"], facts["handshake"] or "-", facts["first"] or "-",
              facts["audio_msgs"], len(audio), audio[-1][0] if audio else 0,
              int(all(x[0] < y[0] for x, y in zip(audio, audio[1:]))),
              facts["errors"], facts["close"] or "-", len(texts), text_early, text_bad))


p = argparse.ArgumentParser()
p.add_argument("url"); p.add_argument("inp"); p.add_argument("out")
p.add_argument("--frames", type=int, default=0)
p.add_argument("--chunk", type=int, default=997)
p.add_argument("--header", action="append", default=[])
p.add_argument("--timeout", type=float, default=10)
p.add_argument("--no-send", action="store_true")
p.add_argument("--realtime", action="store_true",
               help="send each page when its audio is due (granule time)")
p.add_argument("--text", default="")
p.add_argument("--drain", type=float, default=0)
p.add_argument("--eager", action="store_true",
               help="send at once, without waiting for the handshake")
asyncio.run(run(p.parse_args()))
