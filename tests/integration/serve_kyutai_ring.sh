#!/usr/bin/env bash
# serve_kyutai_ring.sh: Kyutai's own LMGen, greedy, reproduced token for
# token through the public path: mt-serve --kv ring --temperature 0
# --text-temperature 0 with the fixture's model (tests/fixtures/kyutai_serve,
# made by tests/fixtures/gen/gen_kyutai_serve.py from Kyutai's LMModel +
# LMGen on the codes synthetic:mimi-tiny makes of this input), and
# mt-replay -t over mt-frame: its transcript is LMGen's undelayed text
# stream, line for line, over 20 frames with a context of 6 (the ring wraps
# within the run). Controls: the codec still makes the fixture's codes (so
# a mismatch is the LM's), the start line shows the window in use beside the
# checkpoint's context, and the default cache (sinks, a longer window)
# differs from Kyutai's once the ring has wrapped.
# fp32 weights and K/V (--weights f32 --kv-dtype f32) as Kyutai's fixture was
# made in fp32. And the options' refusals.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
P=$MT_BIN/mt-probe
FIX=$MT_ROOT/tests/fixtures/kyutai_serve
t_need mt-serve mt-replay mt-probe python3
cd "$T_TMP" || exit 1
t_fast_blas

# the input the fixture was made from (20 frames of 1920 samples at 24 kHz)
python3 - <<'PY'
import math, struct, wave
n = 1920 * 20
w = wave.open("in.wav", "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
w.writeframes(b"".join(struct.pack("<h", int(9000 * math.sin(i * 0.031 + 3 * math.sin(i * 0.0011))
                                          * (0.5 + 0.5 * math.sin(i * 0.00023)))) for i in range(n)))
w.close()
PY
"$P" codec -c synthetic:mimi-tiny -n 2 --encode in.wav codes.txt > /dev/null
t_check "synthetic:mimi-tiny makes the fixture's codes of this input" cmp -s codes.txt "$FIX/codes.txt"

serve() {   # serve NAME ARGS...: a server on NAME.sock, its log NAME.log
    local name=$1; shift
    "$S" -s "$T_TMP/$name.sock" -m "$FIX" --codec synthetic:mimi-tiny --device cpu --threads 1 \
        --weights f32 --kv-dtype f32 --temperature 0 --text-temperature 0 "$@" \
        > "$name.lat" 2> "$name.log" &
    SRV=$!; t_track $SRV
    wait_for_socket "$T_TMP/$name.sock"
}

serve ring --kv ring
grep -q "cache window 6 + 0 sinks (absolute positions) beside the checkpoint's context 6 (Kyutai's ring, --kv ring)" ring.log
t_ok $? "the start line: the window in use beside the checkpoint's context"
timeout 60 "$R" -s "$T_TMP/ring.sock" in.wav -t ring.tr > ring.out 2> ring.err
t_ok $? "mt-replay -t over mt-frame: done $(head -c 200 ring.err)"
t_check "LMGen's undelayed text, token for token ($(wc -l < ring.tr) lines of $(wc -l < "$FIX/expected.tr"))" \
    cmp -s ring.tr "$FIX/expected.tr"
cmp -s ring.tr "$FIX/expected.tr" || diff ring.tr "$FIX/expected.tr" | head -8 | sed 's/^/# /'
t_check "... past the context: the run is longer than the ring (6)" test "$(wc -l < ring.tr)" -gt 12
kill $SRV; wait $SRV 2>/dev/null

serve win
grep -q "cache window 256 + 4 sinks (cache positions) beside the checkpoint's context 6; " win.log
t_ok $? "the default cache says it is not the checkpoint's ring"
timeout 60 "$R" -s "$T_TMP/win.sock" in.wav -t win.tr > win.out 2> win.err
t_ok $? "the default cache, greedy: done"
t_check "... the same tokens while the ring has not wrapped (the first 6 frames)" \
    sh -c '[ "$(head -6 win.tr)" = "$(head -6 "$1")" ]' _ "$FIX/expected.tr"
t_check "... and other tokens after it (Kyutai's ring forgets, the window does not)" \
    sh -c '! cmp -s win.tr "$1"' _ "$FIX/expected.tr"
kill $SRV; wait $SRV 2>/dev/null

# the options' refusals
"$S" -s "$T_TMP/x.sock" -m "$FIX" --codec synthetic:mimi-tiny --kv ring --window 6 2> e1
t_check "--kv ring with --window: usage error (exit 2)" [ $? = 2 ]
"$S" -s "$T_TMP/x.sock" -m synthetic:tiny --kv ring 2> e2
rc=$?
t_check "--kv ring for a model without a context: exit 1 ($(cat e2))" [ $rc = 1 ]
"$S" -s "$T_TMP/x.sock" -m synthetic:tiny --temperature 0.5 2> e3
rc=$?
t_check "sampling for a model that does not sample: exit 1 ($(cat e3))" [ $rc = 1 ]
for bad in "--temperature 10.5" "--text-temperature -1" "--top-k 65537" "--text-top-k x"; do
    "$S" -s "$T_TMP/x.sock" -m "$FIX" $bad 2> e4
    rc=$?
    t_check "$bad: usage error (exit 2: $(head -1 e4))" [ $rc = 2 ]
done
t_done
