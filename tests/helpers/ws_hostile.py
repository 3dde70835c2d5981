#!/usr/bin/env python3
"""ws_hostile.py: hostile WebSocket clients for serve_ws_hostile.sh (issue 51),
on raw sockets (every byte ours: frames masked with a zero key, Ogg pages
made here with their CRC), loopback only. One line of key=value facts out.

  silent URL N HOLD [--src ADDR]   N upgraded connections that say nothing,
                                   held HOLD s: how many the server closed
  endless URL SECS                 one Opus packet continued page after page
                                   (lacing 255) for up to SECS s
  bomb URL EVERY SECS              an Ogg bomb (256 KiB of 120 ms packets of
                                   two bytes) every EVERY s for SECS s
  realtime URL OPUS N              N sessions sending OPUS (one packet a page)
                                   at real time: each answer's lateness
  close URL CASE                   badcode | onebyte | badutf8 | goodclose
  many URL N PAR                   N short sessions, PAR at a time
  keyguess URL K                   K upgrades in a row with a wrong key
  mguess URL K                     K metrics scrapes with a wrong bearer token
"""
import base64, os, select, socket, struct, sys, threading, time, urllib.request

# ---- Ogg pages -------------------------------------------------------------
CRC_T = []
for i in range(256):
    r = i << 24
    for _ in range(8):
        r = ((r << 1) ^ 0x04C11DB7) if r & 0x80000000 else r << 1
    CRC_T.append(r & 0xFFFFFFFF)


def crc(data, r=0):
    for b in data:
        r = ((r << 8) & 0xFFFFFFFF) ^ CRC_T[(r >> 24) ^ b]
    return r


def page(serial, seq, gran, segs, body, flags):
    h = bytearray(b"OggS" + bytes([0, flags]) + struct.pack("<qIII", gran, serial, seq, 0)
                  + bytes([len(segs)]) + bytes(segs))
    struct.pack_into("<I", h, 22, crc(bytes(h) + body))
    return bytes(h) + body


def zero_advance(n):
    """The CRC state after n zero bytes, as 32 columns (CRC is linear)."""
    cols = []
    for i in range(32):
        r = 1 << i
        for _ in range(n):
            r = ((r << 8) & 0xFFFFFFFF) ^ CRC_T[r >> 24]
        cols.append(r)
    return cols


def fast_zero_page(serial, seq, gran, segs, n, flags, cols):
    """A page whose body is n zero bytes, its CRC from the header's."""
    h = bytearray(b"OggS" + bytes([0, flags]) + struct.pack("<qIII", gran, serial, seq, 0)
                  + bytes([len(segs)]) + bytes(segs))
    r, s, i = crc(bytes(h)), 0, 0
    while r:
        if r & 1:
            s ^= cols[i]
        r >>= 1
        i += 1
    struct.pack_into("<I", h, 22, s)
    return bytes(h) + bytes(n)


def headers(serial):
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"test" + struct.pack("<I", 0)
    return (page(serial, 0, 0, [len(head)], head, 2),
            page(serial, 1, 0, [len(tags)], tags, 0))

# ---- WebSocket ---------------------------------------------------------------


def parse(url):
    hp, _, path = url[len("ws://"):].partition("/")
    host, port = hp.rsplit(":", 1)
    return host, int(port), "/" + path


def upgrade(url, extra="", src=None, timeout=10):
    host, port, path = parse(url)
    s = socket.create_connection((host, port), timeout=timeout,
                                 source_address=(src, 0) if src else None)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n"
               % (path, host, port, key, extra)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return s, status, rest


def frame(op, payload):
    n = len(payload)
    h = bytes([0x80 | op])
    if n < 126:
        h += bytes([0x80 | n])
    elif n < 65536:
        h += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        h += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return h + b"\0\0\0\0" + payload   # a zero mask: the payload as it is


class Reader:
    def __init__(self, s, rest=b""):
        self.s, self.buf = s, bytearray(rest)

    def need(self, n):
        while len(self.buf) < n:
            d = self.s.recv(65536)
            if not d:
                raise EOFError
            self.buf += d

    def msg(self):
        """(op, payload) of the next server frame."""
        self.need(2)
        op, n = self.buf[0] & 15, self.buf[1] & 127
        at = 2
        if n == 126:
            self.need(4)
            n, at = struct.unpack_from(">H", self.buf, 2)[0], 4
        elif n == 127:
            self.need(10)
            n, at = struct.unpack_from(">Q", self.buf, 2)[0], 10
        self.need(at + n)
        p = bytes(self.buf[at:at + n])
        del self.buf[:at + n]
        return op, p


def until_close(r, secs):
    """Reads until the server's close: (code, Error texts), or ('-', ...)."""
    errs, end = [], time.time() + secs
    r.s.settimeout(1)
    while time.time() < end:
        try:
            op, p = r.msg()
        except socket.timeout:
            continue
        except (EOFError, OSError):
            return "eof", errs
        if op == 8:
            return (str(struct.unpack(">H", p[:2])[0]) if len(p) >= 2 else "1005"), errs
        if op == 2 and p[:1] == b"\x05":
            errs.append(p[1:].decode("utf-8", "replace"))
    return "-", errs


def wait_handshake(r, secs=10):
    r.s.settimeout(secs)
    while True:
        op, p = r.msg()
        if op == 2 and p[:1] == b"\x00":
            return
        if op == 8:
            raise EOFError("closed before the handshake")

# ---- the cases ----------------------------------------------------------------


def silent(url, n, hold, src):
    conns = []
    for _ in range(n):
        s, st, rest = upgrade(url, src=src)
        conns.append((s, st, Reader(s, rest)))
    ok = sum(1 for c in conns if c[1] == 101)
    ready, stop = os.environ.get("WS_HOSTILE_READY"), os.environ.get("WS_HOSTILE_STOP")
    if ready:
        open(ready, "w").write("upgraded=%d\n" % ok)
    end, closed, codes = time.time() + hold, {}, []
    while time.time() < end and len(closed) < len(conns) and not (stop and os.path.exists(stop)):
        live = [c for c in conns if c[0].fileno() not in closed]
        rd, _, _ = select.select([c[0] for c in live], [], [], 0.2)
        for s, st, r in live:
            if s not in rd:
                continue
            try:
                d = s.recv(65536)
            except OSError:
                d = b""
            r.buf += d
            code = None if d else "eof"
            while code is None and len(r.buf) >= 2 and len(r.buf) >= 2 + (r.buf[1] & 127):
                n7 = r.buf[1] & 127
                if n7 >= 126:   # a long message (audio): skip it whole
                    at = 4 if n7 == 126 else 10
                    if len(r.buf) < at:
                        break
                    ln = int.from_bytes(r.buf[2:at], "big")
                    if len(r.buf) < at + ln:
                        break
                    del r.buf[:at + ln]
                    continue
                if r.buf[0] & 15 == 8:
                    code = str(int.from_bytes(r.buf[2:4], "big")) if n7 >= 2 else "1005"
                del r.buf[:2 + n7]
            if code:
                codes.append(code)
                closed[s.fileno()] = code
    print("upgraded=%d closed=%d codes=%s" % (ok, len(closed), ",".join(codes) or "-"))
    sys.stdout.flush()
    time.sleep(float(os.environ.get("WS_HOSTILE_LINGER", "0")))
    for c in conns:
        c[0].close()


def endless(url, secs):
    s, st, rest = upgrade(url)
    r = Reader(s, rest)
    h0, h1 = headers(0x5eed)
    s.sendall(frame(2, b"\x01" + h0 + h1))
    cols = zero_advance(255 * 255)
    t0, seq, sent, code, errs = time.time(), 2, 0, "-", []
    s.setblocking(False)
    try:
        while time.time() - t0 < secs:
            p = fast_zero_page(0x5eed, seq, -1, [255] * 255, 255 * 255, 1 if seq > 2 else 0, cols)
            data, seq = frame(2, b"\x01" + p), seq + 1
            while data and time.time() - t0 < secs:
                try:
                    k = s.send(data)
                    data, sent = data[k:], sent + k
                except BlockingIOError:
                    select.select([s], [s], [], 0.2)
                    try:
                        d = s.recv(65536)
                        if not d:
                            raise EOFError
                        r.buf += d
                    except BlockingIOError:
                        pass
            if b"\x88" in r.buf:
                break
    except (EOFError, OSError):
        pass
    s.setblocking(True)
    code, errs = until_close(r, 3)
    print("sent_mb=%.1f secs=%.1f close=%s errors=\"%s\"" % (sent / 1e6, time.time() - t0, code,
                                                            ";".join(errs)))


def bomb_message(serial):
    """Pages of 255 packets of two bytes each (code 3: six 20 ms frames of
    no bytes, 120 ms), as many as a 256 KiB message holds."""
    pkt = bytes([(31 << 3) | 3, 6])
    body = pkt * 255
    pages, gran, seq = [], 0, 2
    one = None
    while 1 + (len(pages) + 1) * (27 + 255 + 510) <= 256 * 1024:
        gran += 255 * 5760
        if one is None:
            one = page(serial, seq, gran, [2] * 255, body, 0)
        pages.append(page(serial, seq, gran, [2] * 255, body, 0))
        seq += 1
    return b"\x01" + b"".join(pages)


def bomb(url, every, secs):
    h0, h1 = headers(0xb0b)
    msg = bomb_message(0xb0b)
    t0, n, out = time.time(), 0, []
    while time.time() - t0 < secs:
        t = time.time()
        try:
            s, st, rest = upgrade(url)
            r = Reader(s, rest)
            s.sendall(frame(2, b"\x01" + h0 + h1))
            s.sendall(frame(2, msg))
            code, errs = until_close(r, max(every, 1))
            out.append("%s:%s" % (code, (errs or ["-"])[0][:60].replace(" ", "_")))
            s.close()
        except OSError as e:
            out.append("oserror:%s" % type(e).__name__)
        n += 1
        left = every - (time.time() - t)
        if left > 0:
            time.sleep(left)
    print("bombs=%d outcomes=%s" % (n, ",".join(out)))


def opus_pages(path):
    d = open(path, "rb").read()
    at, out = 0, []
    while at < len(d):
        ns = d[at + 26]
        body = sum(d[at + 27:at + 27 + ns])
        end = at + 27 + ns + body
        out.append((struct.unpack_from("<q", d, at + 6)[0], d[at:end]))
        at = end
    return out


def realtime(url, path, n):
    pages = opus_pages(path)
    want = (pages[-1][0] - 312) // 3840   # whole frames the server answers
    res = [None] * n

    def one(i):
        try:
            s, st, rest = upgrade(url)
            r = Reader(s, rest)
            wait_handshake(r)
            arr = []

            def recv():
                try:
                    r.s.settimeout(15)
                    while len(arr) < want + 1:
                        op, p = r.msg()
                        if op == 8:
                            return
                        if op == 2 and p[:1] == b"\x01":
                            arr.append(time.time())
                except (OSError, EOFError):
                    pass
            th = threading.Thread(target=recv)
            th.start()
            t0 = time.time()
            for gran, pg in pages:
                due = t0 + max(gran - 312, 0) / 48000.0
                if due > time.time():
                    time.sleep(due - time.time())
                s.sendall(frame(2, b"\x01" + pg))
            th.join()
            ans = arr[1:]   # the first is the header pages
            late = [a - (t0 + k * 0.08) for k, a in enumerate(ans)]
            rel = [x - min(late) for x in late] if late else [9]
            med = sorted(late)[len(late) // 2] if late else 0
            res[i] = (len(ans), max(rel), sum(1 for x in late if x - med > 0.08))
            s.sendall(frame(8, b"\x03\xe8"))
            s.close()
        except (OSError, EOFError) as e:
            res[i] = (0, 9.0, 999)
            print("session %d: %s: %s" % (i, type(e).__name__, e))
    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    # late_frames: answers later than one period (80 ms) beyond their
    # session's median lateness
    print("sessions=%d want=%d answered=%s max_late_ms=%.0f late_frames=%d" % (
        n, want, ",".join(str(x[0]) for x in res), 1000 * max(x[1] for x in res),
        sum(x[2] for x in res)))


def many(url, n, par):
    """n sessions, par at a time: upgrade, handshake, close. A session the
    server turned away (its connections all in use, the closing ones
    included, which a loaded host leaves longer) is tried again, up to 5
    times 50 ms apart: retries= counts them."""
    left, lock, t0 = [n], threading.Lock(), time.time()
    done, retries = [0], [0]

    def one():
        s, st, rest = upgrade(url)
        r = Reader(s, rest)
        wait_handshake(r)
        s.sendall(frame(8, b"\x03\xe8"))
        until_close(r, 5)
        s.close()

    def worker():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            for attempt in range(6):
                try:
                    one()
                    with lock:
                        done[0] += 1
                    break
                except (OSError, EOFError):
                    with lock:
                        retries[0] += 1
                    time.sleep(0.05)
    ths = [threading.Thread(target=worker) for _ in range(par)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    print("sessions=%d secs=%.2f retries=%d" % (done[0], time.time() - t0, retries[0]))


def close_case(url, case):
    s, st, rest = upgrade(url)
    r = Reader(s, rest)
    wait_handshake(r)
    payload = {"badcode": (8, b"\x03\xed"), "onebyte": (8, b"\x03"),
               "badutf8": (1, b"ok \xff\xfe"), "goodclose": (8, b"\x03\xe8bye")}[case]
    s.sendall(frame(*payload))
    code, errs = until_close(r, 5)
    print("case=%s close=%s" % (case, code))


def keyguess(url, k):
    t0, st = time.time(), []
    for _ in range(k):
        s, status, rest = upgrade(url, extra="kyutai-api-key: not-the-token-at-all-0000\r\n",
                                  timeout=30)
        st.append(str(status))
        s.close()
    print("statuses=%s secs=%.2f" % (",".join(st), time.time() - t0))


def mguess(url, k):
    t0, st = time.time(), []
    for _ in range(k):
        req = urllib.request.Request(url, headers={"Authorization": "Bearer wrong-wrong-wrong-0"})
        try:
            urllib.request.urlopen(req, timeout=30)
            st.append("200")
        except urllib.error.HTTPError as e:
            st.append(str(e.code))
        except OSError as e:
            st.append(type(e).__name__)
    print("statuses=%s secs=%.2f" % (",".join(st), time.time() - t0))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "silent":
        src = a[a.index("--src") + 1] if "--src" in a else None
        silent(a[1], int(a[2]), float(a[3]), src)
    elif a[0] == "endless":
        endless(a[1], float(a[2]))
    elif a[0] == "bomb":
        bomb(a[1], float(a[2]), float(a[3]))
    elif a[0] == "realtime":
        realtime(a[1], a[2], int(a[3]))
    elif a[0] == "close":
        close_case(a[1], a[2])
    elif a[0] == "many":
        many(a[1], int(a[2]), int(a[3]))
    elif a[0] == "keyguess":
        keyguess(a[1], int(a[2]))
    elif a[0] == "mguess":
        mguess(a[1], int(a[2]))
    else:
        sys.exit("ws_hostile.py: unknown case %s" % a[0])
