#!/usr/bin/env python3
"""seeds_admit.py: writes the seed corpus of fuzz_admit (tests/fuzz/corpus/admit).

Each seed is fuzz_admit's input: a policy byte (0 metronome, 1 aimd,
2 gradient, 3 static:2; +4 the p99 signal, +8 no hold), then mt-serve's
machine stream as mt-admit reads it. The line formats are mt-serve's own
(a real --stdio session's lines are the first seed). Run it from the
repository root when the formats change; the files are committed."""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "admit")

REAL = """request session=1 t=1.761 uid=0 pid=16126 rate=24000 frame_samples=1920 client_model=synthetic:tiny kv_bound=139264 active=0 pending=0
admit session=1 t=1.761 verdict=accept
tick=0 t=1.762 active=1 stepped=1 step_ms=2.341 late_ms=2.535 p50_ms=2.533 p99_ms=2.533 in=5 out=1 fill=0 kv_used=139264 kv_free=536731648 pending=0 admitted=1 rejected=0 preempted=0 naive_ms=2.341 naive_met=100.0 met=100.0 miss=0
tick=22 t=1.764 active=1 stepped=1 step_ms=1.396 late_ms=4.003 p50_ms=4.003 p99_ms=4.003 in=0 out=1 fill=0 kv_used=139264 kv_free=536731648 pending=0 admitted=1 rejected=0 preempted=0 naive_ms=1.396 naive_met=100.0 met=100.0 miss=0
tick=23 t=1.840 active=0 stepped=3 step_ms=4.160 late_ms=0.000 p50_ms=81.457 p99_ms=82.878 in=0 out=3 fill=0 kv_used=139264 kv_free=536731648 pending=0 admitted=1 rejected=0 preempted=0 naive_ms=4.159 naive_met=100.0 met=100.0 miss=0
tick=24 t=1.920 active=0 stepped=0 step_ms=0.000 late_ms=0.000 p50_ms=0.000 p99_ms=0.000 in=0 out=0 fill=0 kv_used=0 kv_free=536870912 pending=0 admitted=1 rejected=0 preempted=0 naive_ms=0.000 naive_met=100.0 met=100.0 miss=0
"""


def tick(k, active, step_ms, late_ms=0.0):
    return ("tick=%d t=%.3f active=%d stepped=%d step_ms=%.3f late_ms=%.3f "
            "p50_ms=%.3f p99_ms=%.3f in=%d out=%d fill=0 kv_used=0 kv_free=1000 "
            "pending=0 admitted=%d rejected=0 preempted=0 naive_ms=%.3f "
            "naive_met=100.0 met=100.0 miss=0\n" %
            (k, k * 0.08, active, active, step_ms, late_ms, step_ms, step_ms * 1.2,
             active, active, active, step_ms))


def rising(n):
    """Load grows with every admission: step time 5 ms + 9 ms per session."""
    out, sid, active = [], 0, 0
    for k in range(n):
        out.append(tick(k, active, 5 + 9 * active, max(0, 9 * active - 60)))
        if k % 3 == 0:
            sid += 1
            out.append("request session=%d t=%.3f uid=0 pid=1 rate=24000 "
                       "frame_samples=1920 client_model=x kv_bound=0 active=%d "
                       "pending=0\n" % (sid, k * 0.08 + 0.01, active))
        if k % 3 == 1:
            out.append("admit session=%d t=%.3f verdict=accept\n" % (sid, k * 0.08 + 0.02))
            active += 1
    return "".join(out)


DIRTY = (tick(0, 0, 1.0) + "tick=1 t=oops\n" + "tick=2\tt=0.1\n" +
         "request session=7 t=0.2 uid=0 pid=1 active=0\r\n" +
         'admit session=7 t=0.3 verdict=reject reason="kv pool full \\"x\\""\n' +
         "frame session=7 seq=1 latency_ms=3.0\n" + "\n" + "x" * 5000 + "\n" +
         "request session=0 t=0.4 uid=0 pid=1 active=0\n" +
         "request session=8 t=-1 uid=0 pid=1 active=0\n" + "tick=9 t=")

SEEDS = {
    "real_stdio_session": (0, REAL),
    "rising_metronome": (0, rising(90)),
    "rising_aimd": (1, rising(60)),
    "rising_gradient": (2, rising(60)),
    "rising_static": (3, rising(30)),
    "rising_p99_nohold": (12, rising(40)),
    "held_without_ticks": (0, "".join(
        "request session=%d t=%.2f uid=0 pid=1 active=0\n" % (i, i * 0.5)
        for i in range(1, 8))),
    "dirty": (0, DIRTY),
}

os.makedirs(OUT, exist_ok=True)
for name, (policy, text) in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([policy]) + text.encode())
