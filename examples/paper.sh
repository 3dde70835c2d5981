#!/usr/bin/env bash
# examples/paper.sh: the paper's experiment at one-GPU scale, on the
# SIMULATED device. synthetic:moshi-7b (32 layers, 32 K/V heads of 128:
# 512 KiB of bf16 K/V a position) on sim:h200-moshi7b (a 141 GB H200 from
# its datasheet: profiles/h200-moshi7b.profile, mt-profile(5)), calls of a
# fixed length arriving as a Poisson process, RUNS runs with the bound
# (--kv window) and RUNS without (--kv full), the same seeds; then a sweep of
# latency against concurrency for both, side by side. No figure here is a
# measurement of a GPU: every one is the simulator's, and is labelled so.
#
#   examples/paper.sh            # the default size: 20+20 runs of 5-minute
#                                # calls, 6-minute loads (about 4 hours of
#                                # soak at SCALE=1, plus the sweep)
#   RUNS=1 SWEEP_KVMEM=4000000000 SWEEP_WINDOW=124 SWEEP_FROM=10 SWEEP_TO=50 \
#     SWEEP_STEP=20 SWEEP_HOLD=40s SWEEP_SCALE=2 examples/paper.sh
#                                # what fit one session here (about 15 min;
#                                # bench/RESULTS.md, 2026-12-04)
#   RUNS=4 SWEEP=0 examples/paper.sh
#                                # 4+4 runs at x1, the most that fit one
#                                # session here (48 min; bench/RESULTS.md)
#   examples/paper.sh --quick    # a pool slice, 40 s calls: the shape of it
#                                # in under a minute (tests/integration/paper_quick.sh)
#   examples/paper.sh --model qwen2.5-7b [--quick]
#                                # another model on its own H200 profile:
#                                # moshi-7b (the default), qwen2.5-7b,
#                                # qwen3-8b, llama-3.2-1b (examples/models.sh
#                                # runs all four)
#
# Every knob is an environment variable (defaults below).
#
# Why a window of 750 positions (+4 sink): one minute of context at 12.5
# frames/s, enough for the turn-taking of a conversation, and the bound at
# which the H200's pool holds about as many sessions as its compute can
# step in one frame period: 48 blocks (768 positions, 384 MiB) a session,
# 303 sessions in the 122 GB pool, while a batch of 300 such sessions is
# predicted at 31 ms (memory-bound: 13 GB of weights + 119 GB of K/V at
# 4.3 TB/s), under the 80 ms period. A shorter window would give up
# context for sessions the pool could hold but nobody asks for at this
# rate; a much longer one makes memory, not compute, the wall again.
# Unbounded, a 5-minute call grows to 3750 positions (1.9 GB): 62 of them
# fill the pool, and at RATE sessions/s the expected demand passes it about
# 290 s into the load in 93% of seeds (mt-probe predict, printed first: "most
# runs", not all), while the bounded
# runs hold about RATE * 300 = 135 sessions, 6480 of the 14545 blocks.
#
# Time scale: SCALE=K runs mt-serve --time-scale K (tick, deadline and every
# simulated step divided by K) and mt-probe paces its clients, arrivals and
# thresholds the same way; every time printed is model time. Host noise
# (a late wake-up of this machine) is multiplied by K in model time, so
# keep K small enough that a scheduler hiccup stays well under the 2 s
# starvation threshold / K. At the whole pool (120-180 sessions at once)
# x2 and x3 stalled the client on the shared 2-core VM (bench/RESULTS.md):
# there, use SCALE=1 and fewer runs, or a quieter machine.
# The soak books a run's collapse to the model only from the pool's
# exhaustion (its first preemption or stall), lateness without bound, or a
# starvation no host stall explains; a stretch of FILL while the pool had
# room and the client's input was starved is this host's, printed per run
# (host_s) and counted apart in table.md ("N of M runs disturbed by the
# host: rerun on a quieter machine"). server-view.md shows each run's tick
# lines beside that reading.
set -euo pipefail
ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}
# every table is read by its columns' names (COLS_AWK)
. "$ROOT/tools/columns.sh"

QUICK=0 NAME=moshi-7b
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --model) [ $# -ge 2 ] || { echo "paper: --model needs a name" >&2; exit 2; }; NAME=$2; shift ;;
    -h|--help) sed -n '2,60p' "$0"; exit 0 ;;
    *) echo "paper: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# Per model: its H200 profile, its bf16 K/V bytes a position (layers x K,V x
# kv_heads x head_dim x 2) and its whole K/V pool on that profile (141e9 less
# the bf16 weights, 2 x mt_model_params, less the 6e9 reserve; each
# profile's comments say the same); for the whole pool, the arrival rate
# (about 1.1x the lowest at which its unbounded pool passes the wall in
# most runs, examples/models.sh) and a session cap above the live sessions
# it brings.
case $NAME in
moshi-7b)     DPROFILE=h200-moshi7b    BPP=524288 WHOLE=122015999488 WRATE=0.45 WMAX=400 ;;
qwen2.5-7b)   DPROFILE=h200-qwen2.5-7b BPP=57344  WHOLE=119741241856 WRATE=4.1  WMAX=2400 ;;
qwen3-8b)     DPROFILE=h200-qwen3-8b   BPP=147456 WHOLE=118587072000 WRATE=1.6  WMAX=1000 ;;
llama-3.2-1b) DPROFILE=h200-llama1b    BPP=32768  WHOLE=132512642560 WRATE=7.9  WMAX=4600 ;;
*) echo "paper: unknown model $NAME (moshi-7b, qwen2.5-7b, qwen3-8b, llama-3.2-1b)" >&2; exit 2 ;;
esac
PROFILE=${PROFILE:-$DPROFILE}
MODEL=${MODEL:-synthetic:$NAME}
SEED=${SEED:-1}
SINK=${SINK:-4}
if [ "$QUICK" = 1 ]; then
    # A 4 GB slice of moshi-7b's pool (7629 positions, 476 blocks; for
    # another model the slice of the same positions), 40 s calls, a
    # 124-position window: the same race between growing caches and a
    # fixed pool, small enough to finish in about a minute at SCALE=4
    # (2+2 runs).
    if [ "$NAME" = moshi-7b ]; then QKV=4000000000; else QKV=$((7630 * BPP)); fi
    RUNS=${RUNS:-2}; CALL=${CALL:-40s}; RATE=${RATE:-1}; DURATION=${DURATION:-45s}
    WINDOW=${WINDOW:-124}; KVMEM=${KVMEM:-$QKV}; SCALE=${SCALE:-4}
    MAXSESS=${MAXSESS:-256}; SWEEP=${SWEEP:-0}
    SWEEP_FROM=${SWEEP_FROM:-10}; SWEEP_TO=${SWEEP_TO:-60}; SWEEP_STEP=${SWEEP_STEP:-10}
    SWEEP_HOLD=${SWEEP_HOLD:-30s}
    OUT=${OUT:-$ROOT/out/paper-quick}
else
    RUNS=${RUNS:-20}; CALL=${CALL:-300s}; RATE=${RATE:-$WRATE}; DURATION=${DURATION:-360s}
    WINDOW=${WINDOW:-750}
    # the profile's whole K/V pool (moshi-7b: 141e9 - 12.984e9 of weights -
    # 6e9 reserve), given explicitly so that the prediction reads the same pool
    KVMEM=${KVMEM:-$WHOLE}
    SCALE=${SCALE:-1}; MAXSESS=${MAXSESS:-$WMAX}; SWEEP=${SWEEP:-1}
    SWEEP_FROM=${SWEEP_FROM:-50}; SWEEP_TO=${SWEEP_TO:-350}; SWEEP_STEP=${SWEEP_STEP:-50}
    SWEEP_HOLD=${SWEEP_HOLD:-300s}     # each level: that many 5-minute calls at once
    OUT=${OUT:-$ROOT/out/paper}
fi
SWEEP_WARMUP=${SWEEP_WARMUP:-5s}
SWEEP_SCALE=${SWEEP_SCALE:-$SCALE}
# the sweep may run on a slice of the pool (a smaller --kv-mem) with its own
# window, when the whole pool's wall needs more sessions than the host can pace
SWEEP_KVMEM=${SWEEP_KVMEM:-$KVMEM}
SWEEP_WINDOW=${SWEEP_WINDOW:-$WINDOW}

for p in mt-probe mt-serve; do
    [ -x "$BIN/$p" ] || { echo "paper: $BIN/$p is not built (run make)" >&2; exit 1; }
done
mkdir -p "$OUT"
P=$BIN/mt-probe
LABEL="simulated, profile $PROFILE; time scale x$SCALE; $RUNS+$RUNS runs, calls fixed:$CALL, poisson:$RATE/s, load $DURATION"
SERVE=(--device "sim:$PROFILE" -m "$MODEL" --max-sessions "$MAXSESS" --kv-mem "$KVMEM")
BOUND=(--kv window --sink "$SINK" --window "$WINDOW")
UNBOUND=(--kv full)
echo "# paper: $LABEL"
echo "# SIMULATED device: no figure below is a measurement of a GPU"

echo "== prediction (mt-probe predict, the unbounded pool race and the bounded capacity)"
"$P" predict -m "$MODEL" --backend cuda --kv-mem "$KVMEM" --sink "$SINK" --window "$WINDOW" \
    --duration "$DURATION" --arrivals "poisson:$RATE" --lengths "fixed:$CALL" \
    --seed "$SEED" --samples 400 --max-sessions "$(( MAXSESS > 512 ? MAXSESS : 512 ))" | tee "$OUT/predict.txt"

# SOAK=0 keeps an earlier run's soak.txt and data/ (e.g. to redo the sweep)
if [ "${SOAK:-1}" = 1 ]; then
echo "== soak: $RUNS runs bounded, $RUNS unbounded, seeds $SEED.. (time scale x$SCALE)"
t0=$(date +%s)
"$P" soak --runs "$RUNS" --seed "$SEED" --duration "$DURATION" \
    --arrivals "poisson:$RATE" --lengths "fixed:$CALL" --time-scale "$SCALE" \
    --plot "$OUT/paper-soak.png" --data "$OUT/data" \
    -- "${SERVE[@]}" "${BOUND[@]}" -- "${SERVE[@]}" "${UNBOUND[@]}" | tee "$OUT/soak.txt"
echo "# soak wall time $(( $(date +%s) - t0 )) s"
fi
# mt-probe's soak figure names the load, not the device: say it is simulated
# (its gnuplot script is kept beside the PNG for exactly this).
if [ -f "$OUT/paper-soak.png.gp" ] && command -v gnuplot >/dev/null; then
    sed -i "s|title \"Collapse soak: |title \"SIMULATED, profile $PROFILE, time scale x$SCALE, window $WINDOW vs full. Collapse soak: |" "$OUT/paper-soak.png.gp"
    gnuplot "$OUT/paper-soak.png.gp" || echo "paper: gnuplot failed on $OUT/paper-soak.png.gp" >&2
fi

# The table for RESULTS.md: k of n per configuration (collapsed by the
# model; runs a host stall disturbed counted apart), predicted against
# measured time to collapse per seed of the unbounded runs, with the host
# stall's time where there was one.
awk -v label="$LABEL" "$COLS_AWK"'
    cols_try("config") { next }
    /^#/ || col("run") !~ /^[0-9]+$/ { next }
    { h = col("host_s") != "-"; nh += h }
    col("config") ~ /^window/ { wn++; if (col("verdict") == "COLLAPSED") wk++; wh += h }
    col("config") == "full" { fn++; if (col("verdict") == "COLLAPSED") fk++; fh += h
        rows = rows sprintf("| %s | %s | %s | %s | %s |\n", col("seed"), col("pred_s"), col("coll_s"),
                            col("ovf_s"), col("host_s")) }
    END {
        if (COLS_BAD) exit 2
        printf "(%s)\n\n", label
        printf "| policy | collapsed (by the model) | disturbed by the host |\n|---|---|---|\n"
        printf "| bounded (window) | %d of %d | %d |\n| unbounded (full) | %d of %d | %d |\n\n", wk, wn, wh, fk, fn, fh
        printf "| seed | predicted overflow s | measured collapse s | first preemption or stall s | host stall s |\n|---|---|---|---|---|\n%s", rows
        if (nh) printf "\n%d of %d runs disturbed by the host: rerun on a quieter machine\n", nh, wn + fn
    }' "$OUT/soak.txt" | tee "$OUT/table.md"

# The server's view of every run (its tick lines, kept under data/), beside
# the soak's own reading of them: the model's collapse is the pool's
# exhaustion (the first preemption or stall); a stretch of FILL while the
# pool had room and the client's input was starved is this host's (the
# soak's host_s). Also shown: the client's worst input over a starvation
# span (25 ticks, 2 s of model time) and steps running long. Tick lines are
# in real time: x SCALE.
if [ -d "$OUT/data" ]; then
    {
    echo
    echo "Server's view per run (tick lines; model time; host_ms = a step's time beyond the profile's prediction and noise, real ms):"
    echo
    echo "| config | seed | verdict | server FILL frames | first preemption s | max lateness ms | worst client input (25 ticks) | at s | steps > pred+10 ms | max host_ms | reading |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    # run config -> "verdict coll_s ovf_s host_s" of the soak's row
    runinfo=$(awk "$COLS_AWK"'cols_try("config") { next } /^#/ || col("run") !~ /^[0-9]+$/ { next }
        { print col("run"), (col("config") == "full"), col("verdict"), col("coll_s"), col("ovf_s"), col("host_s") }
        END { if (COLS_BAD) exit 2 }' "$OUT/soak.txt")
    for f in "$OUT"/data/ticks-c*-r*.log; do
        [ -f "$f" ] || continue
        b=$(basename "$f" .log); c=${b#ticks-c}; c=${c%%-*}; r=${b##*-r}; r=$((10#$r))
        read -r verdict coll ovf host < <(echo "$runinfo" | awk -v c="$c" -v r="$r" \
            '$1 == r && $2 == c { print $3, $4, $5, $6; exit }') || true
        awk -v K="$SCALE" -v c="$c" -v seed=$((SEED + r)) -v verdict="${verdict:-?}" \
            -v coll="${coll:--}" -v ovf="${ovf:--}" -v host="${host:--}" '
            /^tick=/ { for (i = 1; i <= NF; i++) { n = index($i, "="); v[substr($i, 1, n - 1)] = substr($i, n + 1) }
                t++; l = v["late_ms"] * K; if (l > ml) ml = l
                ex = v["step_ms"] - v["sim_pred_ms"] - v["sim_noise_ms"]; if (ex > mx) mx = ex; if (ex > 10) nx++
                fills += v["fill"]; if (v["preempted"] > 0 && pt == "") pt = sprintf("%.1f", v["t"] * K)
                wa[t % 25] = v["active"]; wi[t % 25] = v["in"]
                if (t >= 25) { A = 0; I = 0; for (k = 0; k < 25; k++) { A += wa[k]; I += wi[k] }
                    if (A >= 250 && I / A < wr) { wr = I / A; wt = v["t"] * K } } }
            BEGIN { wr = 9; pt = "" }
            END { if (wr == 9) { wr = 1; wt = "-" } else wt = sprintf("%.1f", wt)
                  reading = "ok"
                  if (verdict == "COLLAPSED") reading = (ovf != "-") ? "model (pool exhausted at " ovf " s)" : "model (lateness or starvation at " coll " s)"
                  else if (fills > 0) reading = "ok, with FILL"
                  if (host != "-") reading = reading "; host stall at " host " s (FILL with the pool not full, input starved): rerun on a quieter machine"
                  printf "| %s | %d | %s | %d | %s | %.0f | %.2f | %s | %d | %.1f | %s |\n",
                      c == 0 ? "bounded" : "unbounded", seed, verdict, fills, pt == "" ? "-" : pt, ml, wr, wt, nx, mx, reading }' "$f"
    done
    } | tee "$OUT/server-view.md"
fi

if [ "$SWEEP" = 1 ]; then
    for pol in window full; do
        args=(--device "sim:$PROFILE" -m "$MODEL" --max-sessions "$MAXSESS" --kv-mem "$SWEEP_KVMEM")
        if [ $pol = window ]; then args+=(--kv window --sink "$SINK" --window "$SWEEP_WINDOW"); else args+=(--kv full); fi
        echo "== sweep, $pol: $SWEEP_FROM..$SWEEP_TO step $SWEEP_STEP, hold $SWEEP_HOLD, pool $SWEEP_KVMEM bytes, window $SWEEP_WINDOW (time scale x$SWEEP_SCALE)"
        t0=$(date +%s)
        "$P" sweep --from "$SWEEP_FROM" --to "$SWEEP_TO" --step "$SWEEP_STEP" \
            --hold "$SWEEP_HOLD" --warmup "$SWEEP_WARMUP" --budget 160 \
            --time-scale "$SWEEP_SCALE" --tsv "$OUT/sweep-$pol.tsv" \
            -- "${args[@]}" | tee "$OUT/sweep-$pol.txt"
        echo "# sweep wall time $(( $(date +%s) - t0 )) s"
    done
    # Side by side: per level, the naive p99 (real frames only) beside the
    # truthful one (FILL counted as missed) and the FILL share.
    # (levels by their order in the window table; a level missing from the
    # full one shows "-")
    awk -F'\t' -v wfile="$OUT/sweep-window.tsv" "$COLS_AWK"'
        cols_try("concurrency") { next }
        /^#/ || NF == 0 { next }
        { n = col("concurrency"); r = col("real") + 0; f = col("fill") + 0
          row = sprintf("%s/%s | %s | %s | %.1f", col("accepted"), col("rejected"), col("p99_ms"),
                        col("p99_true_ms"), (r + f) ? 100 * f / (r + f) : 0)
          if (FILENAME == wfile) { L[++m] = n; W[n] = row } else F[n] = row }
        END { if (COLS_BAD) exit 2
              print "| sessions | window: acc/rej | window p99 naive | window p99 truthful | window FILL % | full: acc/rej | full p99 naive | full p99 truthful | full FILL % |"
              print "|---|---|---|---|---|---|---|---|---|"
              for (k = 1; k <= m; k++) printf "| %s | %s | %s |\n", L[k], W[L[k]], (L[k] in F) ? F[L[k]] : "- | - | - | -" }' \
        "$OUT/sweep-window.tsv" "$OUT/sweep-full.tsv" | tee "$OUT/sweep.md"
    # The plot: truthful p99 against concurrency, window and full; a level
    # whose truthful p99 is "missed" (over 1% FILL) is drawn at the top.
    if command -v gnuplot >/dev/null; then
        for pol in window full; do
            awk -F'\t' "$COLS_AWK"'cols_try("concurrency") { next } /^#/ || NF == 0 { next }
                { tr = col("p99_true_ms"); nv = col("p99_ms"); r = col("real") + 0; fl = col("fill") + 0
                  t = (tr == "missed") ? 5000 : tr; n = (nv == "-" || nv == "missed") ? "NaN" : nv
                  f = (r + fl) ? 100 * fl / (r + fl) : 0
                  print col("concurrency"), n, t, f, col("accepted"), col("rejected") }
                END { if (COLS_BAD) exit 2 }' "$OUT/sweep-$pol.tsv" >"$OUT/sweep-$pol.dat"
        done
        cat >"$OUT/paper-sweep.png.gp" <<EOF
set terminal pngcairo size 1200,520 font ",10"
set output "$OUT/paper-sweep.png"
set multiplot layout 1,2 title "Latency against concurrency, bounded (window $SWEEP_WINDOW) vs unbounded (full), K/V pool $SWEEP_KVMEM bytes\\nSIMULATED, profile $PROFILE, time scale x$SWEEP_SCALE, hold $SWEEP_HOLD per level"
set xlabel "concurrent sessions"
set ylabel "p99 frame latency, ms (model time; top = missed)"
set logscale y
set yrange [10:8000]
set key top left
set arrow from graph 0, first 160 to graph 1, first 160 nohead dt 2 lc rgb "gray"
set label "budget 160 ms (two frame periods)" at graph 0.02, first 190 tc rgb "gray"
plot "$OUT/sweep-window.dat" u 1:3 w lp lw 2 pt 7 lc rgb "#1f77b4" t "window: truthful p99", \
     "$OUT/sweep-window.dat" u 1:2 w lp dt 2 pt 6 lc rgb "#1f77b4" t "window: naive p99 (real frames only)", \
     "$OUT/sweep-full.dat" u 1:3 w lp lw 2 pt 7 lc rgb "#d62728" t "full: truthful p99", \
     "$OUT/sweep-full.dat" u 1:2 w lp dt 2 pt 6 lc rgb "#d62728" t "full: naive p99 (real frames only)"
unset logscale y
unset arrow
unset label
set yrange [0:100]
set ylabel "frames answered with FILL (silence), %"
plot "$OUT/sweep-window.dat" u 1:4 w lp lw 2 pt 7 lc rgb "#1f77b4" t "window", \
     "$OUT/sweep-full.dat" u 1:4 w lp lw 2 pt 7 lc rgb "#d62728" t "full"
unset multiplot
EOF
        gnuplot "$OUT/paper-sweep.png.gp" && echo "wrote $OUT/paper-sweep.png"
    fi
fi
echo "== done: $OUT ($LABEL)"
ls -1 "$OUT" | sed 's/^/  /'
