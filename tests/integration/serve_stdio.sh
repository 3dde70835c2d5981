#!/bin/bash
# serve_stdio: mt-serve --stdio in a plain pipe. A test helper writes the
# frame stream (HELLO, paced AUDIO, END), mt-serve answers on stdout, a
# second helper checks every frame came back in order; the latency lines go
# to stderr, or to --latency-log (SIGHUP reopens it).
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_fast_blas
t_need mt-serve
FC=$MT_TESTBIN/mt-fakeclient
timeout 60 "$FC" --emit -f 40 | timeout 60 "$MT_BIN/mt-serve" --stdio -m synthetic:tiny \
    2>"$T_TMP/err" | timeout 60 "$FC" --read --expect 40 >"$T_TMP/out"
st=("${PIPESTATUS[@]}")
t_check "emitter exit 0" [ "${st[0]}" = 0 ]
t_check "mt-serve --stdio exit 0 at the end of its session" [ "${st[1]}" = 0 ]
t_ok "${st[2]}" "40 frames in, 40 outputs back in order, then END ($(cat "$T_TMP/out"))"
t_check "tick lines on stderr" grep -q '^tick=.* stepped=[1-9]' "$T_TMP/err"
t_check "request line on stderr" grep -q '^request session=1 ' "$T_TMP/err"
t_check "sum of in= is 40" [ "$(awk '/^tick=/{for(i=1;i<=NF;i++) if($i ~ /^in=/){sub("in=","",$i); s+=$i}} END{print s+0}' "$T_TMP/err")" = 40 ]

# unpaced input from a regular file: backpressure, nothing dropped
timeout 60 "$FC" --emit -f 300 --no-pace >"$T_TMP/frames"
timeout 60 "$MT_BIN/mt-serve" --stdio -m synthetic:tiny --latency-log "$T_TMP/lat" \
    <"$T_TMP/frames" 2>"$T_TMP/err2" | timeout 60 "$FC" --read --expect 300 >"$T_TMP/out2"
st=("${PIPESTATUS[@]}")
t_check "stdin from a file: exit 0" [ "${st[0]}" = 0 ]
t_ok "${st[1]}" "300 unpaced frames: all answered in order ($(cat "$T_TMP/out2"))"
t_check "--latency-log holds the tick lines" grep -q '^tick=' "$T_TMP/lat"
t_check "stderr holds no tick lines with --latency-log" sh -c "! grep -q '^tick=' '$T_TMP/err2'"

# SIGHUP reopens the log (rotation)
mkfifo "$T_TMP/in"
timeout 60 "$MT_BIN/mt-serve" --stdio -m synthetic:tiny --latency-log "$T_TMP/rot" \
    <"$T_TMP/in" >/dev/null 2>"$T_TMP/err3" &
SRV=$!; t_track $SRV
exec 7>"$T_TMP/in"
i=0; while [ ! -s "$T_TMP/rot" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
mv "$T_TMP/rot" "$T_TMP/rot.1"
kill -HUP $SRV
i=0; while [ ! -s "$T_TMP/rot" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
t_check "SIGHUP: a new log file is written" grep -q '^tick=' "$T_TMP/rot"
exec 7>&-
wait $SRV
t_check "stdin closed before HELLO: exit 0" [ $? = 0 ]

# --latency-format json: every line of the stream (request, admit, ticks,
# frames) is one JSON object with the logfmt keys, typed
timeout 60 "$FC" --emit -f 20 --no-pace >"$T_TMP/frames4"
timeout 60 "$MT_BIN/mt-serve" --stdio -m synthetic:tiny --latency-format json \
    --latency=frames --latency-log "$T_TMP/json" <"$T_TMP/frames4" 2>/dev/null |
    timeout 60 "$FC" --read --expect 20 >/dev/null
t_check "json: the session ran" test -s "$T_TMP/json"
if command -v python3 >/dev/null; then
    python3 - "$T_TMP/json" <<'PY'
import json, sys
kinds = set()
for n, line in enumerate(open(sys.argv[1]), 1):
    o = json.loads(line)                 # raises on any line that is not JSON
    assert isinstance(o, dict), n
    kind = next(iter(o))
    kinds.add(kind)
    if kind == "tick":
        assert isinstance(o["p99_ms"], (int, float)) and isinstance(o["tick"], int), line
    if kind in ("request", "admit"):
        assert o[kind] is True, line     # the flag
    if kind == "admit":
        assert isinstance(o["verdict"], str), line
assert {"tick", "request", "admit", "frame"} <= kinds, kinds
PY
    t_ok $? "json: every line parses (python3 json), keys typed, all four record kinds"
else
    t_skip "python3 not installed"
fi
# a pool that cannot hold one bounded session: said at start (f16 K/V, the
# CPU's default: 4.25 MiB a session of synthetic:small at S=4 W=256)
timeout 30 "$MT_BIN/mt-serve" --stdio -m synthetic:small --kv-mem 4M </dev/null \
    >/dev/null 2>"$T_TMP/err5"
t_check "--kv-mem 4M: warns that not one bounded session fits" \
    grep -q "warning: kv pool 4 MiB cannot hold one bounded session of 4.25 MiB (S=4 W=256)" "$T_TMP/err5"
timeout 30 "$MT_BIN/mt-serve" --stdio -m synthetic:small </dev/null >/dev/null 2>"$T_TMP/err6"
t_check "default pool, f16 K/V by default: says how many bounded sessions it holds" \
    grep -q "kv pool 512 MiB holds 120 bounded sessions of 4.25 MiB (S=4 W=256)" "$T_TMP/err6"
timeout 30 "$MT_BIN/mt-serve" --stdio -m synthetic:small --kv-dtype f32 </dev/null >/dev/null 2>"$T_TMP/err7"
t_check "--kv-dtype f32: twice the bytes a session, half the sessions" \
    grep -q "kv pool 512 MiB holds 60 bounded sessions of 8.50 MiB (S=4 W=256)" "$T_TMP/err7"
t_done
