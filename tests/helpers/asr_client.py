#!/usr/bin/env python3
"""asr_client.py: a client of Kyutai's streaming speech-to-text protocol
(moshi-server's /api/asr-streaming), written for the tests from their
rust/moshi-server/src/asr.rs and batched_asr.rs with Debian's
python3-websockets and python3-msgpack (none of our code): sends a WAV
file (mono, 24 kHz, 16-bit) as {"type":"Audio","pcm":[floats]} messages,
a {"type":"Marker","id":k} after every --marker-every chunks and one
after the last, then --flush seconds of silence (their clients flush the
model's delay so), and waits until the last marker is back.

Prints one line of facts, key=value:
  ready_first=1 words=N endwords=N markers_sent=N markers_back=N
  marker_order=1 marker_late_words=N ts_monotonic=1 errors="..."
  close=CODE reason="..." elapsed=S audio=S first=TYPE
marker_late_words: EndWord messages received after Marker k whose
stop_time is before the audio sent before Marker k ended (their server's
promise: the words of that audio came first); --log FILE: every message
as a line "T TYPE fields" (T seconds since connecting).

--pace R: send audio at R times real time (0: all at once).
--bad KIND: instead of a good stream, after Ready-or-not send one hostile
message: garbage (a byte MessagePack never uses), trailing (a valid
message then junk), wrongtype ({"type":"Audio","pcm":"x"}), badsample
(a NaN), hugearray (an array header claiming 2^32-1 elements),
notmap (an array), unknown ({"type":"Launch"}), bigmsg (a message over
the server's 256 KiB), markerflood (300 markers at once); then reads what
comes back until the close.

usage: asr_client.py URL IN.wav [--chunk N] [--pace R] [--marker-every N]
       [--flush S] [--header K=V] [--timeout S] [--bad KIND] [--log FILE]
"""
import argparse, asyncio, struct, sys, time, wave

import msgpack
import websockets


def read_wav(path):
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() != 24000:
            sys.exit("asr_client: want mono 16-bit 24 kHz WAV")
        raw = w.readframes(w.getnframes())
    n = len(raw) // 2
    return [s / 32768.0 for s in struct.unpack("<%dh" % n, raw)]


def pack(obj):
    # floats as float32, as serde's f32 would be written
    return msgpack.packb(obj, use_single_float=True)


def hostile(kind):
    if kind == "garbage":
        return b"\xc1"
    if kind == "trailing":
        return pack({"type": "Marker", "id": 1}) + b"\x00\x01"
    if kind == "wrongtype":
        return pack({"type": "Audio", "pcm": "x"})
    if kind == "badsample":
        return pack({"type": "Audio", "pcm": [0.0, float("nan")]})
    if kind == "hugearray":
        return b"\x82\xa4type\xa5Audio\xa3pcm\xdd\xff\xff\xff\xff\xca\x00\x00\x00\x00"
    if kind == "notmap":
        return pack(["Audio", [0.0]])
    if kind == "unknown":
        return pack({"type": "Launch"})
    if kind == "bigmsg":
        return pack({"type": "Audio", "pcm": [0.0] * 70000})
    raise SystemExit("asr_client: unknown --bad " + kind)


async def run(a):
    hdrs = dict(kv.split("=", 1) for kv in a.header)
    f = {"ready_first": 0, "words": 0, "endwords": 0, "markers_sent": 0, "markers_back": 0,
         "marker_order": 1, "marker_late_words": 0, "ts_monotonic": 1, "errors": "",
         "close": "", "reason": "", "elapsed": 0, "audio": 0, "first": ""}
    log = open(a.log, "w") if a.log else None
    t0 = time.monotonic()
    marker_audio = {}          # id -> seconds of audio sent before it
    back = []                  # marker ids in the order they came back
    last_ts = [-1.0]
    try:
        async with websockets.connect(a.url, extra_headers=hdrs, max_size=None,
                                      open_timeout=a.timeout, ping_interval=None) as ws:
            done = asyncio.Event()

            async def reader():
                try:
                    await read_all()
                finally:
                    done.set()     # closed: nothing more will come

            async def read_all():
                async for m in ws:
                    if isinstance(m, str):
                        continue
                    d = msgpack.unpackb(m, raw=False)
                    t = d.get("type")
                    if not f["first"]:
                        f["first"] = t
                        f["ready_first"] = int(t == "Ready")
                    if log:
                        log.write("%.3f %s %s\n" % (time.monotonic() - t0, t,
                                  " ".join("%s=%s" % kv for kv in d.items() if kv[0] != "type")))
                    if t == "Word":
                        f["words"] += 1
                        if d["start_time"] < last_ts[0] - 1e-9:
                            f["ts_monotonic"] = 0
                        last_ts[0] = d["start_time"]
                    elif t == "EndWord":
                        f["endwords"] += 1
                        if d["stop_time"] < last_ts[0] - 1e-9:
                            f["ts_monotonic"] = 0
                        last_ts[0] = d["stop_time"]
                        for k in back:
                            if d["stop_time"] < marker_audio[k] - 1e-9:
                                f["marker_late_words"] += 1
                                break
                    elif t == "Marker":
                        if back and d["id"] < back[-1]:
                            f["marker_order"] = 0
                        back.append(d["id"])
                        f["markers_back"] += 1
                        if d["id"] == a.last_id:
                            done.set()
                    elif t == "Error":
                        f["errors"] += d["message"] + ";"

            rtask = asyncio.ensure_future(reader())
            if a.bad:
                if a.bad == "markerflood":
                    for k in range(300):
                        await ws.send(pack({"type": "Marker", "id": k}))
                else:
                    await ws.send(hostile(a.bad))
                await asyncio.wait_for(rtask, a.timeout)
            else:
                pcm = read_wav(a.wav)
                sent = 0
                ck = 0
                mid = 0
                tstart = time.monotonic()
                while sent < len(pcm):
                    chunk = pcm[sent:sent + a.chunk]
                    await ws.send(pack({"type": "Audio", "pcm": chunk}))
                    sent += len(chunk)
                    ck += 1
                    if a.marker_every and ck % a.marker_every == 0 and sent < len(pcm):
                        marker_audio[mid] = (sent // 1920) * 1920 / 24000.0
                        await ws.send(pack({"type": "Marker", "id": mid}))
                        mid += 1
                    if a.pace > 0:
                        ahead = tstart + sent / 24000.0 / a.pace - time.monotonic()
                        if ahead > 0:
                            await asyncio.sleep(ahead)
                marker_audio[mid] = (sent // 1920) * 1920 / 24000.0
                a.last_id = mid
                await ws.send(pack({"type": "Marker", "id": mid}))
                f["markers_sent"] = mid + 1
                f["audio"] = round(sent / 24000.0, 3)
                silence = [0.0] * a.chunk
                for _ in range(int(a.flush * 24000 / a.chunk) + 1):
                    await ws.send(pack({"type": "Audio", "pcm": silence}))
                    if a.pace > 0:
                        await asyncio.sleep(a.chunk / 24000.0 / a.pace)
                try:
                    await asyncio.wait_for(done.wait(), a.timeout)
                except asyncio.TimeoutError:
                    f["errors"] += "timeout waiting for the last marker;"
                f["elapsed"] = round(time.monotonic() - t0, 3)
                await ws.close()
                try:
                    await asyncio.wait_for(rtask, 5)
                except Exception:
                    pass
            f["close"] = ws.close_code
            f["reason"] = ws.close_reason or ""
    except websockets.exceptions.InvalidStatusCode as e:
        f["errors"] += "http %d;" % e.status_code
    except websockets.exceptions.ConnectionClosed as e:
        f["close"] = e.code
        f["reason"] = e.reason or ""
    except asyncio.TimeoutError:
        f["errors"] += "timeout;"
    if log:
        log.close()
    print(" ".join('%s="%s"' % (k, v) if k in ("errors", "reason") else "%s=%s" % (k, v)
                   for k, v in f.items()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("wav", nargs="?")
    p.add_argument("--chunk", type=int, default=1920)
    p.add_argument("--pace", type=float, default=1.0)
    p.add_argument("--marker-every", type=int, default=0)
    p.add_argument("--flush", type=float, default=1.0)
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--bad")
    p.add_argument("--log")
    a = p.parse_args()
    a.last_id = -1
    asyncio.get_event_loop().run_until_complete(run(a))


if __name__ == "__main__":
    main()
