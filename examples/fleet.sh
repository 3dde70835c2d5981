#!/usr/bin/env bash
# examples/fleet.sh: a fleet of three mt-serve instances on the simulated
# device (sim:h200-llama1b) behind HAProxy (TCP mode, balance leastconn,
# agent-check), all on loopback: a (--max-sessions 6), b (10), and c with
# mt-admit in its loop (its `limit N` is what c publishes). A load larger
# than any one instance arrives; a is drained by SIGTERM at DRAIN_AT s (its
# sessions finish), b is killed with -9 at KILL_AT s (its sessions are
# lost). HAProxy's stats are sampled every 0.5 s: sessions per instance,
# the fleet's total, and the sum of the published limits (the walls), into
# $OUT/fleet.csv and $OUT/fleet.png. SIMULATED: no figure is a measurement.
# About DUR + 10 s (35 s by default).
#   examples/fleet.sh      N=6 DUR=4 DRAIN_AT=2 KILL_AT=3 examples/fleet.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"
N=${N:-28}                  # sessions in the load
DUR=${DUR:-24}              # seconds each session plays
DRAIN_AT=${DRAIN_AT:-8} KILL_AT=${KILL_AT:-14}
SIM="--device sim:h200-llama1b -m synthetic:llama-3.2-1b"
command -v haproxy >/dev/null || { echo "fleet.sh: haproxy not installed (make deps)" >&2; exit 1; }
ex_out fleet
ex_tmp /tmp/mt-fleet
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PA=$(port) PB=$(port) PC=$(port) AA=$(port) AB=$(port) AC=$(port) PH=$(port)

"$BIN/mt-serve" $SIM --listen 127.0.0.1:$PA --agent 127.0.0.1:$AA --max-sessions 6 \
    --drain sessions --drain-timeout 60000 >"$OUT/lat_a" 2>"$OUT/log_a" &
A=$!; PIDS="$PIDS $A"
"$BIN/mt-serve" $SIM --listen 127.0.0.1:$PB --agent 127.0.0.1:$AB --max-sessions 10 \
    >"$OUT/lat_b" 2>"$OUT/log_b" &
B=$!; PIDS="$PIDS $B"
# c's loop: mt-serve > cout; tee < cout > lines (a copy in lat_c);
# mt-admit < lines > ctl; mt-serve --control ctl. FIFOs, not a shell
# pipeline, so that C is mt-serve's own pid (a pipeline's $! is its last
# stage's).
mkfifo "$TMP/ctl" "$TMP/lines" "$TMP/cout"
"$BIN/mt-admit" --budget 80ms --max-limit 12 <"$TMP/lines" >"$TMP/ctl" 2>"$OUT/admit_c.log" &
PIDS="$PIDS $!"
tee "$OUT/lat_c" <"$TMP/cout" >"$TMP/lines" &
PIDS="$PIDS $!"
"$BIN/mt-serve" $SIM --listen 127.0.0.1:$PC --agent 127.0.0.1:$AC --max-sessions 64 \
    --control "$TMP/ctl" >"$TMP/cout" 2>"$OUT/log_c" &
C=$!; PIDS="$C $PIDS"
for f in log_a log_b log_c; do
    for _ in $(seq 300); do grep -q "agent-check on" "$OUT/$f" && break; sleep 0.1; done
done

cat >"$OUT/haproxy.cfg" <<EOF
global
    stats socket $TMP/hap.sock mode 600 level admin
defaults
    mode tcp
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout queue 3s
frontend metronome
    bind 127.0.0.1:$PH
    default_backend mt
backend mt
    balance leastconn
    server a 127.0.0.1:$PA check inter 500ms agent-check agent-port $AA agent-inter 500ms
    server b 127.0.0.1:$PB check inter 500ms agent-check agent-port $AB agent-inter 500ms
    server c 127.0.0.1:$PC check inter 500ms agent-check agent-port $AC agent-inter 500ms
EOF
haproxy -db -f "$OUT/haproxy.cfg" >"$OUT/haproxy.log" 2>&1 &
PIDS="$PIDS $!"
ex_wait_socket "$TMP/hap.sock" 50
sleep 1.5   # the first agent answers

# sample: t, then scur and slim of a, b, c, and each one's status
python3 - "$TMP/hap.sock" "$OUT/fleet.csv" <<'PYEOF' &
import socket, sys, time
t0 = time.time(); out = open(sys.argv[2], "w", buffering=1)
out.write("t,a,b,c,total,lim_a,lim_b,lim_c,walls,st_a,st_b,st_c\n")
while True:
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
        s.sendall(b"show stat\n"); d = b""
        while True:
            b = s.recv(65536)
            if not b: break
            d += b
    except OSError:
        break
    rows = [l.split(",") for l in d.decode().splitlines()]
    head = d.decode().splitlines()[0].lstrip("# ").split(",")
    cur, lim, st = {}, {}, {}
    for f in rows[1:]:
        if len(f) > 20 and f[0] == "mt" and f[1] in ("a", "b", "c"):
            cur[f[1]] = int(f[head.index("scur")] or 0)
            up = f[head.index("status")].startswith("UP")
            lim[f[1]] = int(f[head.index("slim")] or 0) if up else 0
            st[f[1]] = f[head.index("status")].split(" ")[0]
    k = "abc"
    out.write("%.1f,%s,%d,%s,%d,%s\n" % (time.time() - t0, ",".join(str(cur.get(x, 0)) for x in k),
              sum(cur.values()), ",".join(str(lim.get(x, 0)) for x in k), sum(lim.values()),
              ",".join(st.get(x, "?") for x in k)))
    time.sleep(0.5)
PYEOF
SAMPLER=$!; PIDS="$PIDS $SAMPLER"

sox -n -r 24000 -c 1 "$TMP/talk.wav" synth 3 sine 220 vol 0.3 2>/dev/null
"$BIN/mt-replay" -s tcp:127.0.0.1:$PH -n "$N" --stagger 250 --loop --duration "$DUR" \
    "$TMP/talk.wav" >"$OUT/client.log" 2>"$OUT/client.err" &
R=$!
sleep "$DRAIN_AT"; kill -TERM $A
sleep $((KILL_AT - DRAIN_AT))
# the shell's "Killed" notice for b is expected: kept out of the output
{ kill -9 $B; wait $B; } 2>/dev/null || true
# late arrivals after the kill: where do they go?
"$BIN/mt-replay" -s tcp:127.0.0.1:$PH -n 4 --loop --duration 4 "$TMP/talk.wav" \
    >"$OUT/client_late.log" 2>&1 || true
wait $R || true
rc=0; wait $A || rc=$?; echo "a (drained) exit status: $rc"
sleep 1
kill $SAMPLER 2>/dev/null || true
kill -TERM $C 2>/dev/null || true
wait $C 2>/dev/null || true   # tee and mt-admit end at the end of its stream

cnt() { grep -c "$1" "$2" || true; }
# the client's own count, one per session (its last attempt)
key() { sed -n "s/^replay_summary=.* $1=\([0-9]*\).*/\1/p" "$2"; }
echo "SIMULATED (sim:h200-llama1b): sessions in the load: $N"
echo "done:     $(key done "$OUT/client.log")"
echo "refused:  $(key rejected "$OUT/client.log") ($(grep '^replay_rejected=rejected' "$OUT/client.log" | grep -o 'reason="[^"]*"' | sort | uniq -c | tr '\n' ';'))"
echo "failed:   $(key failed "$OUT/client.log") (b's, killed with -9, among them)"
for i in a b c; do echo "admitted by $i: $(cnt 'admitted (tcp' "$OUT/log_$i")"; done
echo "late arrivals after the kill: $(key done "$OUT/client_late.log") of 4 done"
awk -F, 'NR>1 { if ($5 > m) m = $5; if ($9 > w) w = $9 } END { print "peak fleet sessions: " m ", peak sum of published limits: " w }' "$OUT/fleet.csv"
if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 900,500 noenhanced
set output "$OUT/fleet.png"
set datafile separator ","
set title "fleet behind HAProxy (SIMULATED sim:h200-llama1b): drain a at ${DRAIN_AT}s, kill -9 b at ${KILL_AT}s"
set xlabel "s"; set ylabel "sessions"; set key outside right
plot "$OUT/fleet.csv" using 1:2 with steps lw 2 title "a", \
     "" using 1:3 with steps lw 2 title "b", \
     "" using 1:4 with steps lw 2 title "c (mt-admit)", \
     "" using 1:5 with steps lw 3 title "fleet total", \
     "" using 1:9 with steps dt 2 lw 2 title "sum of published limits"
EOF
    echo "plot: $OUT/fleet.png"
fi
