# examples/lib.sh: what the example scripts share, sourced by them (not
# run): where the programs are, an output folder, a scratch folder whose
# background programs are stopped on exit, and the admission loop.
#
#   . "$(dirname "$0")/lib.sh"     ROOT (MT_ROOT) and BIN (MT_BIN) are set
#   ex_out NAME                    OUT (default out/NAME) exists
#   ex_tmp TEMPLATE                TMP=$(mktemp -d TEMPLATE.XXXXXX); on exit
#                                  every pid in PIDS is killed and TMP removed
#   ex_wait_socket PATH TRIES [PID]
#   ex_admission_loop TICKS ADMIT_LOG SERVE_LOG BUDGET MT-SERVE-ARG...

ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}

ex_out() {
    OUT=${OUT:-$ROOT/out/$1}
    mkdir -p "$OUT"
}

# Stops what the example started (by pid, never by name), then waits for
# all of it, so that nothing writes into TMP after it is gone.
ex_cleanup() {
    [ "$BASHPID" = "${EX_MAIN:-$BASHPID}" ] || return 0   # not in a subshell
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}

ex_tmp() {
    EX_MAIN=$BASHPID
    TMP=$(mktemp -d "$1.XXXXXX")
    PIDS=""
    trap ex_cleanup EXIT
}

# Waits until PATH is a socket: at most TRIES tenths of a second, and no
# longer than PID lives when one is given. Always 0: the caller decides
# what a missing socket means.
ex_wait_socket() {
    for _ in $(seq "$2"); do
        [ -S "$1" ] && break
        [ -z "${3:-}" ] || kill -0 "$3" 2>/dev/null || break
        sleep 0.1
    done
    return 0
}

# mt-admit deciding mt-serve's admissions: mt-serve's machine stream is
# copied to TICKS and read by mt-admit (--budget BUDGET), whose answers go
# back into mt-serve's --control. Three stages joined by FIFOs in TMP, so
# that each pid is known and stopped by itself: all three in PIDS, SERVE is
# mt-serve's. 0, or 1 when the FIFOs cannot be made.
ex_admission_loop() {
    local ticks=$1 admit_log=$2 serve_log=$3 budget=$4
    shift 4
    mkfifo "$TMP/ctl" "$TMP/lines" "$TMP/lines2" || return 1
    "$BIN/mt-admit" --budget "$budget" <"$TMP/lines2" >"$TMP/ctl" 2>"$admit_log" &
    PIDS="$PIDS $!"
    tee "$ticks" <"$TMP/lines" >"$TMP/lines2" &
    PIDS="$PIDS $!"
    "$BIN/mt-serve" "$@" --control "$TMP/ctl" >"$TMP/lines" 2>"$serve_log" &
    SERVE=$!
    PIDS="$SERVE $PIDS"
}
