#!/usr/bin/env bash
# serve_metrics.sh: mt-serve --metrics (issue 41). A scrape of /metrics
# taken while mt-replay's sessions run is accepted by promtool (Debian's
# prometheus package) and agrees with the latency lines: each counter is
# the sum (frames) or the total (sessions) of the first N tick records,
# N being the scrape's metronome_ticks_total. After the sessions end every
# input is an output or a counted miss. /health answers; hostile HTTP
# (garbage, an oversize head, a body, idle connections past the cap) gets
# a status or a close and never keeps a scraper out; with --token-file
# /metrics wants the bearer token; off loopback without a token or
# --insecure the server refuses to start.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
PY=/usr/bin/python3
t_need mt-serve mt-replay sox
cd "$T_TMP" || exit 1

# http PORT REQUEST-BYTES (python escapes) [TOKEN]: the raw answer on stdout
cat > http.py <<'PYEOF'
import socket, sys
port, req = int(sys.argv[1]), sys.argv[2].encode().decode('unicode_escape').encode('latin-1')
s = socket.create_connection(("127.0.0.1", port), timeout=20)
s.sendall(req)
data = b""
try:
    while True:
        b = s.recv(65536)
        if not b: break
        data += b
except Exception as e:
    print("error", e); sys.exit(1)
sys.stdout.write(data.decode('latin-1'))
PYEOF
http() { "$PY" http.py "$@"; }
get() { http "$1" "GET $2 HTTP/1.1\r\nHost: x\r\n${3:+Authorization: Bearer $3\r\n}\r\n"; }
body() { sed '1,/^\r$/d'; }   # the body of an answer on stdin
port_of() {   # port_of LOG: the metrics port a server logged
    local i=0
    while [ $i -lt 300 ]; do
        p=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$1")
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
# status CODE FILE: the answer in FILE has that status
status() { head -1 "$2" | grep -q "^HTTP/1.1 $1 "; }
# metric FILE NAME: a sample's value
metric() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }

sox -n -r 24000 -c 1 talk.wav synth 4 pinknoise vol 0.3 2>/dev/null
t_fast_blas
"$S" -s "$T_TMP/s.sock" --metrics 127.0.0.1:0 -m synthetic:echo --threads 1 \
    --max-sessions 3 > lat 2> log &
SRV=$!; t_track $SRV
P=$(port_of log)
t_check "the log names the metrics address" test -n "$P"
wait_for_socket "$T_TMP/s.sock" 300

# four sessions at once, three admitted: one refusal counted
timeout 60 "$R" -s "$T_TMP/s.sock" -n 4 talk.wav > replay.txt 2>&1 &
RP=$!
i=0   # until the sessions run and have been answered a while
while [ $i -lt 100 ]; do
    get "$P" /metrics > a1
    body < a1 > scrape1
    [ "$(metric scrape1 metronome_sessions_live)" = 3 ] &&
        [ "$(metric scrape1 metronome_frames_out_total)" -ge 30 ] && break
    sleep 0.1; i=$((i + 1))
done
t_check "/metrics answers 200" status 200 a1
t_check "... with the exposition's content type" grep -qi "^Content-Type: text/plain; version=0.0.4" a1
live=$(metric scrape1 metronome_sessions_live)
t_check "the scrape is taken while sessions run (live=$live)" test "${live:-0}" -ge 1
if command -v promtool >/dev/null; then
    promtool check metrics < scrape1 > promtool.txt 2>&1
    rc=$?
    t_check "promtool check metrics accepts the exposition (rc $rc) $(head -c 300 promtool.txt)" \
        test $rc = 0 -a ! -s promtool.txt
else
    t_skip "promtool not installed (Debian package prometheus)"
fi
wait $RP

# the latency lines for the ticks the first scrape covered
N=$(metric scrape1 metronome_ticks_total)
t_check "the first scrape covers some ticks (N=$N)" test "${N:-0}" -gt 0
grep '^tick=' lat | head -n "$N" > first
t_check "the latency lines hold those N ticks" test "$(wc -l < first)" = "$N"
sum() { awk -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) s += kv[2] } } END { print s + 0 }' first; }
last() { tail -1 first | tr ' ' '\n' | sed -n "s/^$1=//p"; }
for kv in in:frames_in out:frames_out fill:frames_fill miss:frames_missed; do
    k=${kv%%:*} m=metronome_${kv#*:}_total
    t_check "$m = the sum of $k= over the first $N tick lines ($(metric scrape1 $m) vs $(sum $k))" \
        test "$(metric scrape1 $m)" = "$(sum $k)"
done
for kv in admitted:sessions_admitted_total rejected:sessions_refused_total \
          active:sessions_live shed:sessions_shed_total limit:sessions_limit; do
    k=${kv%%:*} m=metronome_${kv#*:}
    t_check "$m = tick $N's $k= ($(metric scrape1 $m) vs $(last $k))" \
        test "$(metric scrape1 $m)" = "$(last $k)"
done
t_check "the refusal of the fourth session is counted" \
    test "$(metric scrape1 metronome_sessions_refused_total)" = 1
lat_n=$(awk -v P=80 '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "late_ms" && kv[2] + 0 > P) n++ } } END { print n + 0 }' first)
t_check "metronome_late_ticks_total = tick lines with late_ms over the period ($lat_n)" \
    test "$(metric scrape1 metronome_late_ticks_total)" = "$lat_n"
t_check "the lateness histogram counts every tick" \
    test "$(metric scrape1 'metronome_tick_lateness_seconds_bucket{le="+Inf"}')" = "$N"

# once the sessions are over
i=0
while [ $i -lt 50 ]; do
    get "$P" /metrics | body > scrape2
    [ "$(metric scrape2 metronome_sessions_live)" = 0 ] &&
        [ "$(metric scrape2 metronome_sessions_ended_total)" = 3 ] && break
    sleep 0.2; i=$((i + 1))
done
t_check "after the sessions: 3 admitted" test "$(metric scrape2 metronome_sessions_admitted_total)" = 3
t_check "after the sessions: 3 ended" test "$(metric scrape2 metronome_sessions_ended_total)" = 3
t_check "after the sessions: none live" test "$(metric scrape2 metronome_sessions_live)" = 0
fin=$(metric scrape2 metronome_frames_in_total)
fout=$(metric scrape2 metronome_frames_out_total)
fmiss=$(metric scrape2 metronome_frames_missed_total)
t_check "every input an output or a counted miss (in $fin = out $fout + miss $fmiss)" \
    test "$fin" -gt 0 -a "$fin" = $((fout + fmiss))

# /health, HEAD, wrong paths and methods
get "$P" /health > h.txt
t_check "/health: 200" status 200 h.txt
t_check "/health: ok" test "$(body < h.txt)" = ok
http "$P" "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n" > head.txt
t_check "HEAD /metrics: 200" status 200 head.txt
t_check "HEAD /metrics: no body" test -z "$(body < head.txt)"
get "$P" /nope > nope.txt
t_check "/nope: 404" status 404 nope.txt
http "$P" "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" > post.txt
t_check "POST /metrics: 405" status 405 post.txt
t_check "POST /metrics: Allow: GET, HEAD" grep -q "^Allow: GET, HEAD" post.txt

# hostile bytes
http "$P" '\x16\x03\x01\x00\xff garbage\r\n\r\n' > garbage.txt
t_check "garbage: 400" status 400 garbage.txt
http "$P" "GET / HTTP/1.1\r\nX: $(head -c 9000 /dev/zero | tr '\0' a)" > big.txt
t_check "an oversize head: 431" status 431 big.txt
http "$P" 'GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n123456789' > withbody.txt
t_check "a body announced: 400" status 400 withbody.txt
# twenty idle connections (the cap is 16): a scraper still gets in, and an
# idle one is closed by the server (its deadline, 5 s)
"$PY" - "$P" > idle.txt <<'PYEOF'
import socket, sys, time
port = int(sys.argv[1])
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
for s in idle: s.sendall(b"GET /metr")
time.sleep(0.3)
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while True:
    b = s.recv(65536)
    if not b: break
    data += b
print("scrape", data.split(b"\r\n")[0].decode())
last = idle[-1]; last.settimeout(15)
try:
    print("idle closed" if last.recv(100) == b"" else "idle answered")
except Exception as e:
    print("idle error", e)
PYEOF
t_check "twenty idle connections: a scrape still gets 200" grep -q "scrape HTTP/1.1 200" idle.txt
t_check "an idle connection is closed by the server" grep -q "idle closed" idle.txt
t_check "the server is still up" kill -0 $SRV
kill $SRV; wait $SRV 2>/dev/null
t_check "the log counts the bad requests" grep -q "metrics: .* bad request" log

# FILL counted: with a 1 ms deadline every input is answered by FILL
# before the tick steps it (the naive "on time" of a server that lies).
# The step takes 5 ms (a simulated device whose round costs that, labelled
# simulated in its lines): with synthetic:echo's step of microseconds, a
# client whose frames happened to arrive within 1 ms before the ticks
# (its phase against them is chance, and holds for the session) had every
# output on time and no FILL at all (CI, 2026-12-08: "0 vs 0").
sox -n -r 24000 -c 1 short.wav synth 1.5 pinknoise vol 0.3 2>/dev/null
sed -e 's/^name .*/name          = fill-5ms/' -e 's/^overhead_us .*/overhead_us   = 5000/' \
    "$MT_ROOT/tests/profiles/hostpath.profile" > fill.profile
"$S" -s "$T_TMP/f.sock" --metrics 127.0.0.1:0 -m synthetic:echo --device sim:fill.profile \
    --threads 1 --fill --deadline-ms 1 > latf 2> logf &
SRVF=$!; t_track $SRVF
PF=$(port_of logf)
wait_for_socket "$T_TMP/f.sock" 300
timeout 60 "$R" -s "$T_TMP/f.sock" short.wav > replayf 2>&1
rcf=$?
t_check "FILL: the replay's session ran (rc $rcf)" test $rcf = 0
i=0
while [ $i -lt 50 ]; do
    get "$PF" /metrics | body > scrapef
    [ "$(metric scrapef metronome_sessions_ended_total)" = 1 ] && break
    sleep 0.2; i=$((i + 1))
done
kill $SRVF; wait $SRVF 2>/dev/null
NF=$(metric scrapef metronome_ticks_total)
fills=$(grep '^tick=' latf | head -n "$NF" | tr ' ' '\n' | sed -n 's/^fill=//p' | awk '{ s += $1 } END { print s + 0 }')
t_check "FILL frames counted: metronome_frames_fill_total = the sum of fill= ($(metric scrapef metronome_frames_fill_total) vs $fills)" \
    test "$(metric scrapef metronome_frames_fill_total)" = "$fills" -a "$fills" -gt 0
if command -v promtool >/dev/null; then
    promtool check metrics < scrapef > promtoolf.txt 2>&1
    rc=$?
    t_check "promtool accepts that exposition too (rc $rc)" test $rc = 0 -a ! -s promtoolf.txt
fi

# a token: /metrics wants it as a bearer token, /health does not
head -c 24 /dev/urandom | base64 > tok
"$S" -s "$T_TMP/t.sock" --token-file tok --metrics 127.0.0.1:0 -m synthetic:echo \
    --threads 1 > lat2 2> log2 &
SRV2=$!; t_track $SRV2
P2=$(port_of log2)
t_check "with a token: the log says so" grep -q "bearer token required" log2
get "$P2" /metrics > t1.txt
t_check "no token: 401" status 401 t1.txt
get "$P2" /metrics wrong-token-0123456789 > t2.txt
t_check "wrong token: 401" status 401 t2.txt
get "$P2" /metrics "$(cat tok)" > t3.txt
t_check "the token: 200" status 200 t3.txt
get "$P2" /health > t4.txt
t_check "/health needs none" status 200 t4.txt
kill $SRV2; wait $SRV2 2>/dev/null

# off loopback without a token
timeout 20 "$S" -s "$T_TMP/u.sock" --metrics 0.0.0.0:0 -m synthetic:echo --threads 1 > /dev/null 2> log3
rc=$?
t_check "--metrics 0.0.0.0 without a token refuses to start (rc $rc)" test $rc != 0
t_check "... saying why" grep -q "not a loopback address" log3
t_done
