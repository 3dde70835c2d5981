#!/bin/bash
# serve_admission: socket safety, admission and options: refuses to replace
# a file or a live server's socket, replaces a stale socket, creates 0600;
# static --max-sessions; --control FIFO (accept, reject with reason,
# timeout); window mode refuses a session the KV pool cannot hold whatever
# the controller says; usage errors exit 2; SIGTERM removes the socket.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_fast_blas
S=$MT_BIN/mt-serve
FC=$MT_TESTBIN/mt-fakeclient
t_need mt-serve
SOCK=$T_TMP/s.sock

"$S" --help >"$T_TMP/help"; t_ok $? "--help exits 0"
t_check "--help names --kv-mem" grep -q -- '--kv-mem' "$T_TMP/help"
"$S" --bogus 2>/dev/null; t_check "unknown option: exit 2" [ $? = 2 ]
"$S" -s "$SOCK" --kv nope 2>/dev/null; t_check "bad --kv value: exit 2" [ $? = 2 ]
"$S" 2>/dev/null; t_check "neither -s nor --stdio: exit 2" [ $? = 2 ]

echo precious >"$T_TMP/file"
"$S" -s "$T_TMP/file" -m synthetic:tiny 2>"$T_TMP/e1"; rc=$?
t_check "refuses a regular file at the socket path (exit 1)" [ $rc = 1 ]
t_check "and leaves it alone" grep -q precious "$T_TMP/file"
/usr/bin/python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])" "$SOCK"
t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" -m synthetic:tiny --max-sessions 2
sleep 0.5; i=0; while ! grep -q 'on ' "$T_TMP/log" && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
t_check "replaces a stale socket" grep -q 'removed stale socket' "$T_TMP/log"
t_check "socket mode 0600" [ "$(stat -c %a "$SOCK")" = 600 ]
"$S" -s "$SOCK" -m synthetic:tiny 2>"$T_TMP/e2"; rc=$?
t_check "refuses a live server's socket (exit 1)" [ $rc = 1 ]
t_check "refuses a live server's socket: says another server has it" grep -q 'another server' "$T_TMP/e2"
timeout 30 "$FC" -s "$SOCK" -n 3 -f 10 >"$T_TMP/c1"
t_check "--max-sessions 2: two served" [ "$(grep -c 'state=done' "$T_TMP/c1")" = 2 ]
t_check "--max-sessions 2: the third rejected, not as final" \
    grep -q 'state=rejected.* final=0 .*server at its session limit' "$T_TMP/c1"
t_check "request lines for all three" [ "$(grep -c '^request session=' "$T_TMP/lat")" = 3 ]
t_check "HELLO mismatch answered with a final REJECT (MT_FLAG_FINAL) and a reason" \
    sh -c "timeout 30 '$FC' -s '$SOCK' -n 1 -f 5 --bad wrong-format | grep -q 'state=rejected.* final=1 .*format mismatch'"
kill -TERM $SRV; wait $SRV
t_ok $? "SIGTERM: exit 0"
t_check "socket removed at exit" [ ! -e "$SOCK" ]

# (these servers keep fp32 K/V, --kv-dtype f32: the f16 check below
# compares against their bound)
# control FIFO; a pool that holds two sessions' bounds (window 64: 68
# positions, 5 blocks of 16, each 16 positions x position bytes)
mkfifo "$T_TMP/ctl"
# control_after3 LAT HOLD LINE...: in the background (pid in CTL), once LAT
# has 3 request lines (or 10 s passed), each LINE written to the control
# FIFO, which is then held open HOLD s more.
control_after3() {
    local lat=$1 hold=$2; shift 2
    ( exec 3>"$T_TMP/ctl"
      i=0; while [ $(grep -c '^request' "$lat") -lt 3 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
      printf '%s\n' "$@" >&3; sleep "$hold" ) &
    CTL=$!
}
t_serve "$T_TMP/lat2" "$T_TMP/log2" -s "$SOCK" -m synthetic:tiny --window 60 --kv-dtype f32 --control "$T_TMP/ctl" --admit-timeout 1500
wait_for_socket "$SOCK" 300
bound=""
control_after3 "$T_TMP/lat2" 3 "accept 1" "reject 2 over budget" "nonsense"
timeout 30 "$FC" -s "$SOCK" -n 3 -f 10 >"$T_TMP/c2"
wait $CTL
t_check "control: accept" [ "$(grep -c 'state=done' "$T_TMP/c2")" = 1 ]
t_check "control: reject with the controller's reason" grep -q 'state=rejected.*over budget' "$T_TMP/c2"
t_check "control: unanswered request rejected after --admit-timeout" grep -q 'state=rejected.*no answer from the admission controller' "$T_TMP/c2"
t_check "control: a malformed line is logged and ignored" grep -q 'control: ignoring malformed' "$T_TMP/log2"
kill -TERM $SRV; wait $SRV
bound=$(awk '/^request /{for(i=1;i<=NF;i++) if($i ~ /^kv_bound=/){sub("kv_bound=","",$i); print $i; exit}}' "$T_TMP/lat2")
t_check "request lines carry kv_bound" [ -n "$bound" ]

# window mode: pool of 2 bounds; the controller accepts all 3, the third
# is still rejected
t_serve "$T_TMP/lat3" "$T_TMP/log3" -s "$SOCK" -m synthetic:tiny --window 60 --kv-dtype f32 --kv-mem $((2 * bound)) --control "$T_TMP/ctl"
wait_for_socket "$SOCK" 300
control_after3 "$T_TMP/lat3" 1 "accept 1" "accept 2" "accept 3"
timeout 30 "$FC" -s "$SOCK" -n 3 -f 10 >"$T_TMP/c3"
wait $CTL
t_check "window: two sessions fit the pool and are served" [ "$(grep -c 'state=done' "$T_TMP/c3")" = 2 ]
t_check "window: the third is rejected although accepted by the controller, not as final" \
    grep -q 'state=rejected.* final=0 .*KV pool cannot hold' "$T_TMP/c3"
kill -TERM $SRV; wait $SRV
t_ok $? "exit 0"

# a pool smaller than one bound: every session is refused, and the REJECT
# says asking again cannot help (MT_FLAG_FINAL)
t_serve "$T_TMP/lat5" "$T_TMP/log5" -s "$SOCK" -m synthetic:tiny --window 60 --kv-dtype f32 --kv-mem $((bound / 2))
wait_for_socket "$SOCK" 300
timeout 30 "$FC" -s "$SOCK" -n 1 -f 5 >"$T_TMP/c5"
t_check "pool under one bound: a final REJECT naming the whole pool" \
    grep -q 'state=rejected.* final=1 .*the whole pool is' "$T_TMP/c5"
kill -TERM $SRV; wait $SRV

# --kv-dtype f16: a position takes half the bytes, so the same --kv-mem (two
# fp32 bounds) admits four sessions; the fifth is rejected.
t_serve "$T_TMP/lat4" "$T_TMP/log4" -s "$SOCK" -m synthetic:tiny --window 60 --kv-mem $((2 * bound)) --kv-dtype f16
wait_for_socket "$SOCK" 300
timeout 30 "$FC" -s "$SOCK" -n 5 -f 10 >"$T_TMP/c4"
t_check "f16 K/V: four sessions fit the pool of two fp32 bounds" [ "$(grep -c 'state=done' "$T_TMP/c4")" = 4 ]
t_check "f16 K/V: the fifth is rejected" grep -q 'state=rejected.*KV pool cannot hold' "$T_TMP/c4"
bound16=$(awk '/^request /{for(i=1;i<=NF;i++) if($i ~ /^kv_bound=/){sub("kv_bound=","",$i); print $i; exit}}' "$T_TMP/lat4")
t_check "f16 K/V: kv_bound is half the fp32 one" [ "$((2 * ${bound16:-0}))" = "$bound" ]
kill -TERM $SRV; wait $SRV
"$S" -s "$SOCK" --kv-dtype f8 2>/dev/null; t_check "bad --kv-dtype: exit 2" [ $? = 2 ]
"$S" -s "$SOCK" --weights bf16 2>/dev/null; t_check "bad --weights: exit 2" [ $? = 2 ]
t_done
