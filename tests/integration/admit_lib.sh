#!/bin/bash
# admit_lib: shell functions shared by the admit_*.sh tests and
# bench/bench_admit.sh (sourced after lib.sh): a simple sweep that finds
# the wall N*, a stream of clients arriving faster than capacity, and the
# figures of a closed-loop run read from mt-serve's lines.
# Run directly (as make test does with every tests/integration/*.sh), it
# only says it is a library.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "1..0 # SKIP helper library, sourced by admit_*.sh and bench_admit.sh"
    exit 0
fi

# tick_field FILE-LINES KEY: awk helper text that puts key values in v[]
ADMIT_AWK_PARSE='{ split("", v); for (i = 1; i <= NF; i++) { j = index($i, "="); if (j) v[substr($i, 1, j - 1)] = substr($i, j + 1) } }'
# isort(a, n): sorts a[1..n] numerically (mawk has no asort)
ADMIT_AWK_SORT='function isort(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } }'

# The percentile a sweep level is judged by: mt-probe sweep's wall and the
# metronome controller's target are both p99, so N* is too.
ADMIT_Q=${ADMIT_Q:-0.99}

# admit_level_stat LATFILE FROM N BUDGET: the counted ticks of level N
# after line FROM of LATFILE, as "COUNT OVER QUANTILE" (OVER: ticks over
# BUDGET; QUANTILE: nan under 5 ticks)
admit_level_stat() {
    tail -n +"$(($2 + 1))" "$1" | awk -v n="$3" -v b="$4" -v q="$ADMIT_Q" -v skip="${ADMIT_SKIP:-8}" "$ADMIT_AWK_SORT /^tick=/ $ADMIT_AWK_PARSE"'
        /^tick=/ && v["active"] == n && v["stepped"] >= n {
            if (++k <= skip) next
            y = v["step_ms"] + 0; if (v["late_ms"] + 0 > y) y = v["late_ms"] + 0
            ys[++m] = y; if (y > b) over++
        }
        END {
            if (m < 5) { printf "%d %d nan\n", m, over; exit }
            isort(ys, m); i = int(q * m + 0.999); if (i < 1) i = 1
            printf "%d %d %.2f\n", m, over + 0, ys[i]
        }'
}

# admit_level SOCK LATFILE BUDGET N FRAMES: the level's p99, or nan. A
# level is stopped as soon as more of its ticks are over BUDGET than its
# quantile allows (it has failed: what is left would only take time).
admit_level() {
    local sock=$1 lat=$2 budget=$3 n=$4 frames=$5 from p st allow
    from=$(wc -l <"$lat")
    allow=$(awk -v f="$frames" -v s="${ADMIT_SKIP:-8}" -v q="$ADMIT_Q" 'BEGIN { printf "%d", (f - s) * (1 - q) }')
    timeout $((frames / 8 + 30)) "$FC" -s "$sock" -n "$n" -f "$frames" --end-timeout 5 \
        >"$T_TMP/sweep.$n" 2>&1 &
    p=$!
    while kill -0 "$p" 2>/dev/null; do
        sleep 0.5
        st=$(admit_level_stat "$lat" "$from" "$n" "$budget")
        [ "$(echo "$st" | cut -d' ' -f2)" -gt "$allow" ] && { kill "$p" 2>/dev/null; break; }
    done
    wait "$p" 2>/dev/null
    sleep 0.3
    admit_level_stat "$lat" "$from" "$n" "$budget" | cut -d' ' -f3
}

# admit_sweep SOCK LATFILE BUDGET MAXN FRAMES [BISECT-FRAMES]: levels of N concurrent
# sessions of FRAMES frames each against a running server whose stdout
# goes to LATFILE, after a warm-up level: N doubles from 1 until a level
# fails, then bisects. A level passes when the ADMIT_Q quantile (p99) of
# max(step_ms, late_ms) over its ticks (the first ADMIT_SKIP skipped) is
# under BUDGET; give a level 100 counted ticks or more, so that one
# hiccup of a shared machine does not fail it. The bisection's levels,
# the ones near the wall that decide N*, run BISECT-FRAMES frames
# (default FRAMES): a p99 over 200 ticks is the third-worst tick, over
# 100 the second. ADMIT_RETRY=K runs a failing level up to K more times
# before it counts as failed (a wall fails every time; a burst of the
# host's own load, on a device whose wall is not this machine's, rarely
# twice). Prints N*, the largest
# passing level below the first failing one; one line per level goes to
# $T_TMP/sweep.levels.
admit_sweep() {
    local sock=$1 lat=$2 budget=$3 maxn=$4 frames=$5 bframes=${6:-$5} n=1 lo=0 hi=0 p mid
    : >"$T_TMP/sweep.levels"
    # a warm-up level, not counted: the first steps of a fresh server pay
    # for page faults and the BLAS threads' start
    admit_level "$sock" "$lat" "$budget" 2 30 >/dev/null
    admit_pass() {
        local try
        for try in $(seq 0 "${ADMIT_RETRY:-0}"); do
            p=$(admit_level "$sock" "$lat" "$budget" "$1" "${2:-$frames}")
            echo "n=$1 q$ADMIT_Q=$p$([ "$try" -gt 0 ] && echo " (again)")" >>"$T_TMP/sweep.levels"
            [ -n "$p" ] && [ "$p" != nan ] && awk -v p="$p" -v b="$budget" 'BEGIN { exit !(p <= b) }' && return 0
        done
        return 1
    }
    while [ $n -le "$maxn" ]; do
        if admit_pass $n; then lo=$n; n=$((n * 2)); else hi=$n; break; fi
    done
    [ $hi = 0 ] && { echo "$lo"; return; }
    while [ $((hi - lo)) -gt 1 ]; do
        mid=$(((lo + hi) / 2))
        if admit_pass $mid "$bframes"; then lo=$mid; else hi=$mid; fi
    done
    echo "$lo"
}

# admit_arrivals SOCK SECONDS INTERVAL FRAMES: one new session of FRAMES
# frames every INTERVAL seconds for SECONDS seconds; then the client is
# stopped. Rejected sessions end at once. Client output: $T_TMP/clients.
admit_arrivals() {
    # One new session every EVERY s for SECS s, all from one mt-fakeclient
    # process (as the sweep's load comes from one process: a process per
    # session would compete with the server for the cores and make the
    # loop see a slower machine than the sweep measured).
    local sock=$1 secs=$2 every=$3 frames=$4 n ms p
    n=$(awk -v s="$secs" -v e="$every" 'BEGIN { printf "%d", s / e + 0.999 }')
    ms=$(awk -v e="$every" 'BEGIN { printf "%g", e * 1000 }')
    # FC_ARGS: more mt-fakeclient options (a time-scaled server's period);
    # FC_CHRT: a command to run it under (bench_admit.sh: chrt -f N)
    timeout $((secs + frames / 12 + 20)) ${FC_CHRT:-} "$FC" -s "$sock" -n "$n" --arrive-ms "$ms" \
        -f "$frames" --end-timeout 2 ${FC_ARGS:-} >"$T_TMP/clients" 2>&1 &
    p=$!
    t_track $p
    sleep "$secs"
    kill "$p" 2>/dev/null
    wait "$p" 2>/dev/null
}

# admit_summary LATFILE BUDGET WARM LAST: figures of a closed-loop run:
#   settled     median active over the LAST seconds before the last request
#   peak        highest active in that time
#   reached_t   seconds from the first accept until active first reached
#               the settled level
#   late_ticks  ticks from WARM s after the first accept to the last request
#               whose late_ms exceeded BUDGET
#   episodes    runs of consecutive such ticks
#   sustained   episodes of 3 ticks or more: overshoot (a single late tick
#               is a compute hiccup of a shared machine, recovered at once)
#   fills       FILL frames sent (full mode's silent lateness)
#   accepted, rejected   the server's verdict lines
admit_summary() {
    awk -v budget="$2" -v warm="$3" -v last="$4" "$ADMIT_AWK_SORT $ADMIT_AWK_PARSE"'
        /^admit / && v["verdict"] == "accept" { if (!fa) fa = v["t"] + 0; acc++ }
        /^admit / && v["verdict"] == "reject" { rej++ }
        /^request / { lr = v["t"] + 0 }
        /^tick=/ { nt++; T[nt] = v["t"] + 0; A[nt] = v["active"] + 0; L[nt] = v["late_ms"] + 0;
                   F[nt] = v["fill"] + 0; P[nt] = v["preempted"] + 0 }
        END {
            m = 0; peak = 0
            for (i = 1; i <= nt; i++) if (T[i] >= lr - last && T[i] <= lr) { s[++m] = A[i]; if (A[i] > peak) peak = A[i] }
            isort(s, m); settled = m ? s[int((m + 1) / 2)] : 0
            reached = -1
            for (i = 1; i <= nt; i++) if (fa && T[i] >= fa && A[i] >= settled && settled > 0) { reached = T[i] - fa; break }
            late = 0; ep = 0; run = 0; sus = 0; fills = 0; pre = 0
            for (i = 1; i <= nt + 1; i++) {
                if (i <= nt) { fills += F[i]; pre += P[i] }
                if (i <= nt && fa && T[i] >= fa + warm && T[i] <= lr && L[i] > budget && A[i] > 0) {
                    late++; if (!run) ep++; run++
                } else {
                    if (run >= 3) sus++
                    run = 0
                }
            }
            printf "settled=%d peak=%d reached_t=%.1f late_ticks=%d episodes=%d sustained=%d fills=%d preempted=%d accepted=%d rejected=%d\n",
                   settled, peak, reached, late, ep, sus, fills, pre, acc, rej
        }' "$1"
}
