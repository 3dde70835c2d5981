# lib.sh: shared helpers for the integration tests (sourced, not run).
# TAP output, a private temp dir removed on exit, and process cleanup that
# ends only the pids this test started.
MT_BIN=${MT_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}
MT_TESTBIN=${MT_TESTBIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/tests}
MT_ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
export MT_BIN MT_TESTBIN MT_ROOT
T_N=0
T_FAILED=0
T_PIDS=""
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mt-test.XXXXXX")

T_MAIN=$BASHPID
# Only the test's own shell cleans up. A background subshell killed in the
# instant after its fork (a watchdog ended as soon as its target died) can
# still run the parent's EXIT trap; without this guard it removed T_TMP
# under the running test (CI, serve_hostile.sh, 2026-12-04).
t_cleanup() {
    [ "$BASHPID" = "$T_MAIN" ] || return 0
    for p in $T_PIDS; do kill "$p" 2>/dev/null; done
    for p in $T_PIDS; do wait "$p" 2>/dev/null; done
    rm -rf "$T_TMP"
}
trap t_cleanup EXIT

t_track() { T_PIDS="$T_PIDS $1"; }          # remember a pid to stop at exit
t_ok() {   # t_ok COND-EXIT-STATUS "name"
    T_N=$((T_N + 1))
    if [ "$1" -eq 0 ]; then echo "ok $T_N - $2"
    else echo "not ok $T_N - $2"; T_FAILED=$((T_FAILED + 1)); fi
}
t_check() { # t_check "name" command...
    local name=$1; shift
    if "$@"; then t_ok 0 "$name"; else t_ok 1 "$name"; fi
}
# t_todo "why" "name" command...: a check of a known-open acceptance
# criterion (its issue stays open). TAP TODO: reported, not counted as a
# failure; prove says when it unexpectedly passes.
t_todo() {
    local why=$1 name=$2; shift 2
    T_N=$((T_N + 1))
    if "$@"; then echo "ok $T_N - $name # TODO $why"
    else echo "not ok $T_N - $name # TODO $why"; fi
}
t_skip() { T_N=$((T_N + 1)); echo "ok $T_N # SKIP $1"; }
t_skip_all() { echo "1..0 # SKIP $1"; exit 0; }
t_diag() { echo "# $*"; }
t_done() { echo "1..$T_N"; [ "$T_FAILED" -eq 0 ]; exit $?; }
# t_at_most "name" X LIMIT, t_above "name" X LIMIT: checks of a number
# against a limit, compared by awk (so 1e-5 and 0.25 alike).
t_at_most() { t_check "$1" awk -v x="$2" -v l="$3" 'BEGIN { exit !(x <= l) }'; }
t_above() { t_check "$1" awk -v x="$2" -v l="$3" 'BEGIN { exit !(x > l) }'; }
# t_timing NORMAL ASAN: a timing limit, relaxed under ASan (MT_ASAN set)
t_timing() { if [ -n "$MT_ASAN" ]; then echo "$2"; else echo "$1"; fi; }
# The baseline for a time limit, taken in the same run: t_hiccup_start
# starts a sampler that sleeps 5 ms at a time beside the test and keeps
# the largest lateness of its wake-ups; t_hiccup_ms prints it (ms) so far.
# A limit on a server's tick gap or a frame's latency is then LIMIT plus
# what this host's scheduler took from any process meanwhile: a busy
# machine moves both alike, while a server that blocks (on a stalled or
# hostile client) still goes far past it. t_limit LIMIT prints that sum.
# t_hiccup_start CMD... runs the sampler under CMD (as $(t_fifo): the
# policy of what it is the baseline for).
t_hiccup_start() {
    "$@" /usr/bin/python3 -c '
import os, signal, sys, time
m, out = 0.0, sys.argv[1]
def save():
    with open(out + ".tmp", "w") as f:
        f.write("%.1f\n" % (m * 1000))
    os.replace(out + ".tmp", out)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
save()
while True:
    t = time.monotonic(); time.sleep(0.005); d = time.monotonic() - t - 0.005
    if d > m:
        m = d
        save()
' "$T_TMP/hiccup" &
    t_track $!
}
t_hiccup_ms() { cat "$T_TMP/hiccup" 2>/dev/null || echo 0; }
# t_limit LIMIT [BASE]: the larger of LIMIT and 3 x BASE (the same figure
# measured in this run without the disturbance under test: a busy machine
# slows a step in both phases alike), plus the hiccups so far.
t_limit() {
    awk -v l="$1" -v h="$(t_hiccup_ms)" -v b="${2:-0}" \
        'BEGIN { x = l; if (3 * b > x) x = 3 * b; printf "%.0f", x + h }'
}
# t_max_lat FILE: the largest lat_max_ms of mt-fakeclient's session lines
t_max_lat() {
    awk '/^session=/ { for (i = 1; i <= NF; i++) if ($i ~ /^lat_max_ms=/) {
             v = substr($i, 12) + 0; if (v > m) m = v } } END { print m + 0 }' "$1"
}
# t_max_gap FILE: the largest gap between consecutive tick lines, ms
t_max_gap() {
    awk '/^tick=/ { for (i = 1; i <= NF; i++) if ($i ~ /^t=/) { t = substr($i, 3) + 0
             if (n++ && t - p > g) g = t - p; p = t } } END { printf "%.0f\n", g * 1000 }' "$1"
}
# wait_for_socket PATH [tenths]: until a Unix socket exists (30 s unless
# told: a server loading its model on a busy host starts slowly)
wait_for_socket() {
    local i=0 n=${2:-300}
    while [ ! -S "$1" ] && [ $i -lt "$n" ]; do sleep 0.1; i=$((i + 1)); done
    [ -S "$1" ]
}
# wait_for_line FILE REGEX [tenths]: until a line of FILE matches (30 s
# unless told). mt-serve's first tick line on stdout is written by its log
# thread after its tick thread ran: the server's threads all exist then,
# which its socket (made before them) does not tell.
wait_for_line() {
    local i=0 n=${3:-300}
    while ! grep -q -- "$2" "$1" 2>/dev/null && [ $i -lt "$n" ]; do sleep 0.1; i=$((i + 1)); done
    grep -q -- "$2" "$1" 2>/dev/null
}
# t_host_busy: 0 (true) when the host is busier than its cores (the
# 1-minute load average at or over nproc, as beside a build), with the
# figure in T_LOAD. Real-time checks of a simulated device measure the
# host too: such a host gets a skip that gives the load, never a pass.
t_host_busy() {
    T_LOAD=$(cut -d' ' -f1 /proc/loadavg)
    awk -v l="$T_LOAD" -v n="$(nproc)" 'BEGIN { exit !(l >= n) }'
}
# t_fifo: prints "chrt -f 10" where this process may run under SCHED_FIFO
# (root, CAP_SYS_NICE or an rtprio limit), nothing elsewhere. A check of
# a simulated device's tick signal (the device sleeps: no CPU to hog) run
# under it measures the server's timing, not a neighbour's build taking
# the cores; where it is not permitted such a check keeps its host skips.
t_fifo() { chrt -f 10 true 2>/dev/null && echo "chrt -f 10"; }
# t_rt_serve: mt-serve's arguments that make its step wake and run on
# time beside a busy neighbour where SCHED_FIFO is permitted (t_fifo):
# the I/O, tick and log threads at priority 10 and the step on the tick
# thread alone (--threads 1: no pool workers left at the normal policy
# for the tick to wait on). For a small model whose step takes a few ms;
# not under ASan (MT_ASAN), whose steps are many times longer and whose
# timing no test judges.
t_rt_serve() { [ -z "$MT_ASAN" ] && [ -n "$(t_fifo)" ] && echo "--rt-priority 10 --threads 1"; }
# The transport the serve/replay tests use: MT_TRANSPORT=unix (default) or
# tcp. With tcp the server listens on its Unix socket and on a loopback TCP
# port (so wait_for_socket still tells when it is up), and the clients
# connect over TCP: t_listen_args PATH gives the server's arguments,
# t_endpoint PATH the address a client is given.
MT_TRANSPORT=${MT_TRANSPORT:-unix}
t_free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
if [ "$MT_TRANSPORT" = tcp ]; then T_PORT=$(t_free_port); fi
t_listen_args() {
    if [ "$MT_TRANSPORT" = tcp ]; then echo "-s $1 --listen 127.0.0.1:$T_PORT"
    else echo "-s $1"; fi
}
t_endpoint() {
    if [ "$MT_TRANSPORT" = tcp ]; then echo "tcp:127.0.0.1:$T_PORT"
    else echo "$1"; fi
}
# t_need NAME...: skip the whole test unless each is there: an mt-* name is
# a program this tree builds ($MT_BIN, or $MT_TESTBIN for the test
# helpers), anything else a command that must be installed.
t_need() {
    local n
    for n; do
        case $n in
            mt-*) [ -x "$MT_BIN/$n" ] || [ -x "$MT_TESTBIN/$n" ] ||
                      t_skip_all "$n not built" ;;
            *) command -v "$n" >/dev/null || t_skip_all "$n not installed" ;;
        esac
    done
}
# t_fast_blas: OpenBLAS picks slow generic kernels on a virtual CPU; its
# AVX-512 ones when the CPU has them (an explicit setting wins).
t_fast_blas() {
    grep -q avx512f /proc/cpuinfo 2>/dev/null &&
        export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
    return 0
}
# t_serve OUT ERR ARGS...: mt-serve ARGS in the background, its stdout in
# OUT and stderr in ERR; its pid in SRV, stopped at exit. The caller waits
# for the socket (each test names that check its own way).
t_serve() {
    local out=$1 err=$2; shift 2
    "$MT_BIN/mt-serve" "$@" >"$out" 2>"$err" &
    SRV=$!; t_track $SRV
}
# t_serve_test [NAME...]: the start of a test of mt-serve: fast BLAS, and a
# skip unless mt-serve, mt-fakeclient and each NAME are there (as t_need);
# the server's socket path in SOCK, the fake client in FC.
t_serve_test() {
    t_fast_blas
    t_need mt-serve mt-fakeclient "$@"
    SOCK=$T_TMP/serve.sock
    FC=$MT_TESTBIN/mt-fakeclient
}
# t_png FILE "name": FILE starts as a PNG does (skipped without gnuplot)
t_png() {
    if command -v gnuplot >/dev/null; then
        head -c 8 "$1" 2>/dev/null | od -An -c | grep -q "P   N   G"
        t_ok $? "$2"
    else
        t_skip "gnuplot not installed"
    fi
}
