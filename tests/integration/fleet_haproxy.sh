#!/usr/bin/env bash
# fleet_haproxy: two mt-serve instances of different capacities behind
# HAProxy (TCP mode, balance leastconn, agent-check), all on loopback, on
# the simulated device (little CPU). HAProxy is started and stopped here,
# with its configuration in the test's temp dir.
#  1. the stats socket shows each instance's published limit (maxconn)
#     within two agent intervals;
#  2. a load of their combined capacity is spread as published, every
#     session done, no frame lost; one more is refused with a reason
#     ("no capacity (closed by the proxy)"), not failed;
#  3. `limit N` on an instance's control input moves its published figure;
#  4. SIGTERM: HAProxy shows DRAIN, the instance's sessions finish, new ones
#     land on the other, it exits 0;
#  5. kill -9: HAProxy marks it DOWN and new sessions go to the other;
#  6. (issue 37) floods through HAProxy, where every client shares its
#     address: 100 idle connections, then 140 wrong-token HELLOs held
#     open, never keep a client with the token out for more than a second
#     (the idle ones never reach an instance: the frontend waits for the
#     client's first bytes, as mt-serve(1) recommends).
# Serial lane: its second part holds six 4-second sessions and must try a
# seventh while they last, which a loaded light lane can outwait.
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
FC=$MT_TESTBIN/mt-fakeclient
HC=$MT_TESTBIN/mt-holdconns
HAP=$(command -v haproxy || echo /usr/sbin/haproxy)
PY=/usr/bin/python3
[ -x "$S" ] || t_skip_all "mt-serve not built"
[ -x "$FC" ] || t_skip_all "mt-fakeclient not built"
[ -x "$HAP" ] || t_skip_all "haproxy not installed (make deps)"
cd "$T_TMP" || exit 1

SIM="--device sim:h200-llama1b -m synthetic:llama-3.2-1b"
CAP_A=2 CAP_B=4
INTER_MS=500                          # agent and health-check interval
PA=$(t_free_port) PB=$(t_free_port) AA=$(t_free_port) AB=$(t_free_port) PH=$(t_free_port)
HSOCK=$T_TMP/hap.sock

# hstat SERVER FIELD: a field of HAProxy's "show stat" for backend be
hstat() {
    "$PY" - "$HSOCK" "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b"show stat\n"); data = b""
while True:
    b = s.recv(65536)
    if not b: break
    data += b
lines = data.decode().splitlines()
head = lines[0].lstrip("# ").split(",")
for l in lines[1:]:
    f = l.split(",")
    if len(f) > 1 and f[0] == "be" and f[1] == sys.argv[2]:
        print(f[head.index(sys.argv[3])]); break
PYEOF
}
# wait_stat SERVER FIELD PATTERN MS: until the field matches (grep -E)
wait_stat() {
    local until=$(( $(date +%s%3N) + $4 ))
    while [ "$(date +%s%3N)" -lt $until ]; do
        hstat "$1" "$2" | grep -Eq "$3" && return 0
        sleep 0.1
    done
    t_diag "$1 $2 is '$(hstat "$1" "$2")', wanted $3"
    return 1
}
admitted() { grep -c "admitted (tcp" "$1"; }
wait_log() {   # wait_log FILE PATTERN TENTHS
    local i=0
    while ! grep -q "$2" "$1" 2>/dev/null && [ $i -lt "$3" ]; do sleep 0.1; i=$((i + 1)); done
    grep -q "$2" "$1"
}

# Instance B answers admission through --control (so that `limit N` can be
# written to it): a small controller accepts every request it sees.
mkfifo ctl_b
start_a() {
    "$S" $SIM --listen 127.0.0.1:$PA --agent 127.0.0.1:$AA --max-sessions $CAP_A --drain sessions \
        > lat_a 2> "log_a$1" &
    A=$!; t_track $A
    wait_log "log_a$1" "agent-check on tcp" 300
}
start_a 1
"$S" $SIM --listen 127.0.0.1:$PB --agent 127.0.0.1:$AB --max-sessions $CAP_B \
    --control ctl_b > lat_b 2> log_b &
B=$!; t_track $B
"$PY" - lat_b ctl_b <<'PYEOF' &
import os, re, sys, time
f = open(sys.argv[1]); out = os.open(sys.argv[2], os.O_WRONLY)
while True:
    l = f.readline()
    if not l:
        time.sleep(0.02); continue
    m = re.match(r"request session=(\d+)", l)
    if m: os.write(out, b"accept %s\n" % m.group(1).encode())
PYEOF
t_track $!
t_check "instance B listens" wait_log log_b "agent-check on tcp" 300
t_check "instance A listens" grep -q "agent-check on tcp" log_a1

cat > haproxy.cfg <<EOF
global
    stats socket $HSOCK mode 600 level admin
defaults
    mode tcp
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout queue 2s
frontend fe
    bind 127.0.0.1:$PH
    # a connection that sends nothing never takes an instance's place
    tcp-request inspect-delay 2s
    tcp-request content accept if { req.len gt 0 }
    tcp-request content reject
    default_backend be
backend be
    balance leastconn
    server a 127.0.0.1:$PA check inter ${INTER_MS}ms agent-check agent-port $AA agent-inter ${INTER_MS}ms
    server b 127.0.0.1:$PB check inter ${INTER_MS}ms agent-check agent-port $AB agent-inter ${INTER_MS}ms
EOF
t_check "haproxy accepts the configuration" "$HAP" -c -q -f haproxy.cfg
"$HAP" -db -f haproxy.cfg > hap.log 2>&1 &
H=$!; t_track $H
i=0; while [ ! -S "$HSOCK" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done

# ---- 1. the published limits --------------------------------------------------
# two agent intervals, and the first check's spread within one
t_check "1: a publishes maxconn $CAP_A within two agent intervals" wait_stat a slim "^$CAP_A\$" $((3 * INTER_MS))
t_check "1: b publishes maxconn $CAP_B within two agent intervals" wait_stat b slim "^$CAP_B\$" $((3 * INTER_MS))
t_check "1: tick lines carry limit=$CAP_A" grep -q " limit=$CAP_A\$" lat_a
t_check "1: the health check leaves no log lines" bash -c "! grep -q 'closed' log_a1"

# ---- 2. the combined capacity ---------------------------------------------------
N=$((CAP_A + CAP_B))
timeout 60 "$FC" -s tcp:127.0.0.1:$PH -n $N -f 50 --arrive-ms 50 --end-timeout 20 > load2 &
L=$!
t_check "2: both instances full" wait_stat a scur "^$CAP_A\$" 5000
wait_stat b scur "^$CAP_B\$" 3000 >/dev/null
sox -n -r 24000 -c 1 one.wav synth 2 sine 300 vol 0.3 2>/dev/null
timeout 20 "$R" -s tcp:127.0.0.1:$PH one.wav > over.txt 2>&1
t_check "2: one more session is refused with a reason" grep -q 'replay_rejected=rejected.*reason="no capacity (closed by the proxy)"' over.txt
wait $L; rc=$?
t_check "2: the load's client exits 0" test $rc = 0
t_check "2: every session done, no frame lost" \
    grep -q "^total sessions=$N ok=1 done=$N .* missing=0" load2
t_check "2: a took $CAP_A (as published)" test "$(admitted log_a1)" = $CAP_A
t_check "2: b took $CAP_B (as published)" test "$(admitted log_b)" = $CAP_B

# ---- 3. limit N ----------------------------------------------------------------
echo "limit 1" > ctl_b
t_check "3: limit 1 on b's control moves its published maxconn" wait_stat b slim '^1$' $((3 * INTER_MS))
t_check "3: b's tick lines say limit=1" wait_log lat_b " limit=1\$" 30
echo "limit $CAP_B" > ctl_b
wait_stat b slim "^$CAP_B\$" $((3 * INTER_MS)) >/dev/null

# ---- 4. SIGTERM: drain (--drain sessions: they run to their own END) -----------
# a's sessions straight to its port, so that they are a's whatever
# leastconn would have chosen
a0=$(admitted log_a1)
timeout 60 "$FC" -s tcp:127.0.0.1:$PA -n $CAP_A -f 60 --end-timeout 20 > load4 &
L=$!
i=0; while [ "$(admitted log_a1)" -lt $((a0 + CAP_A)) ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $A
t_check "4: HAProxy shows a as DRAIN" wait_stat a status '^DRAIN' $((3 * INTER_MS))
b1=$(admitted log_b)
timeout 30 "$FC" -s tcp:127.0.0.1:$PH -n 2 -f 10 > new4
t_check "4: new sessions land on b" test "$(admitted log_b)" = $((b1 + 2))
t_check "4: ... and none on a" test "$(admitted log_a1)" = $((a0 + CAP_A))
wait $L; rc=$?
t_check "4: a's sessions finish (done, no frame lost)" \
    grep -q "^total sessions=$CAP_A ok=1 done=$CAP_A .* missing=0" load4
wait $A; rc=$?
t_check "4: a exits 0 after the drain" test $rc = 0

# ---- 5. kill -9 ------------------------------------------------------------------
start_a 2
t_check "5: a is back up" wait_stat a status '^UP' 5000
kill -9 $B; wait $B 2>/dev/null
t_check "5: HAProxy marks b DOWN" wait_stat b status '^DOWN' 5000
a2=$(admitted log_a2)
timeout 30 "$FC" -s tcp:127.0.0.1:$PH -n 2 -f 10 > new5
t_check "5: new sessions go to a" test "$(admitted log_a2)" = $((a2 + 2))
t_check "5: ... all done" grep -q "^total sessions=2 ok=1 done=2 " new5

# ---- 6. floods through HAProxy (issue 37) ------------------------------------------
# both instances back, with a token (the wrong-token flood needs one)
kill -TERM $A; wait $A
head -c 24 /dev/urandom | base64 > tok
head -c 24 /dev/urandom | base64 > bad
chmod 600 tok bad
"$S" $SIM --listen 127.0.0.1:$PA --agent 127.0.0.1:$AA --max-sessions $CAP_A \
    --token-file tok > lat_a3 2> log_a3 &
A=$!; t_track $A
"$S" $SIM --listen 127.0.0.1:$PB --agent 127.0.0.1:$AB --max-sessions $CAP_B \
    --token-file tok > lat_b3 2> log_b3 &
B=$!; t_track $B
wait_log log_a3 "agent-check on tcp" 300
wait_log log_b3 "agent-check on tcp" 300
wait_stat a status '^UP' 5000 >/dev/null
wait_stat b status '^UP' 5000 >/dev/null
timeout 30 "$HC" -s tcp:127.0.0.1:$PH -n 100 --hold 2 --reconnect-ms 5 \
    --probe-token tok --probes 3 --probe-every 500 > idle6.txt 2>&1
t_diag "idle through HAProxy: $(grep -E '^probe|^total' idle6.txt | tr '\n' ' ')"
t_check "6: 100 idle connections through HAProxy: the 3 probes with the token admitted" \
    test "$(grep -c 'probe verdict=accept' idle6.txt)" = 3
pm=$(sed -n 's/^probe_max_ms=\([0-9]*\).*/\1/p' idle6.txt)
t_at_most "6: ... each within 1 s ($pm ms)" "$pm" "$(t_timing 1000 3000)"
timeout 30 "$HC" -s tcp:127.0.0.1:$PH -n 140 --hello-token bad --hold 2 --reconnect-ms 5 \
    --probe-token tok --probes 3 --probe-every 500 > wrong6.txt 2>&1
t_diag "wrong tokens through HAProxy: $(grep -E '^probe|^total' wrong6.txt | tr '\n' ' ')"
t_check "6: 140 wrong-token HELLOs held open through HAProxy: the 3 probes admitted" \
    test "$(grep -c 'probe verdict=accept' wrong6.txt)" = 3
pm=$(sed -n 's/^probe_max_ms=\([0-9]*\).*/\1/p' wrong6.txt)
t_at_most "6: ... each within 1 s ($pm ms)" "$pm" "$(t_timing 1000 3000)"
kill -TERM $A $B; wait $A $B
kill $H; wait $H 2>/dev/null
t_done
