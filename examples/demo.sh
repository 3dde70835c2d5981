#!/usr/bin/env bash
# examples/demo.sh: the main job (`make demo`). Generates a spoken file with
# espeak-ng, starts mt-serve on synthetic:small on a temporary socket with
# mt-admit deciding admissions (mt-serve's lines -> mt-admit -> a FIFO back
# into mt-serve's --control), replays several sessions of the speech through
# it in real time with mt-replay, prints mt-probe summarize's table of the
# server's and the client's latency lines, writes the returned audio and a
# plot, stops everything it started (by pid) and says where the files are.
# Then the contrast (step 6), the reason the project exists: the same seeded
# load against the bounded cache (--kv window) and the unbounded one (--kv
# full) on the SIMULATED device (sim:h200-moshi7b serving synthetic:moshi-7b
# on a 4 GB slice of its K/V pool, time-scaled x3 so a 50 s load takes
# about 17 s), the truthful and naive figures of both side by side, and one
# plot: memory climbing to the wall, then service falling off the cliff
# while the naive figure stays at 100%. Step 7 serves a Kyutai-format
# model (the tiny LM with the tiny Mimi): audio in, audio and text out.
#
# About a minute (SESSIONS sessions of speech, then two 50 s loads at x3).
#   examples/demo.sh       SESSIONS=2 CSCALE=10 MODEL=synthetic:tiny examples/demo.sh
#
# If a program is not built yet it says which and exits 1: it never pretends.
set -u
. "$(dirname "$0")/lib.sh"
OUT=${OUT:-$ROOT/out/demo}
SESSIONS=${SESSIONS:-4}
MODEL=${MODEL:-synthetic:small}

missing=""
for p in mt-serve mt-replay mt-probe mt-admit; do
    [ -x "$BIN/$p" ] || missing="$missing $p"
done
command -v espeak-ng >/dev/null || missing="$missing espeak-ng(Debian package)"
if [ -n "$missing" ]; then
    echo "demo: cannot run: not built or not installed:$missing" >&2
    echo "demo: (run 'make' first; programs are looked for in $BIN)" >&2
    exit 1
fi

# OpenBLAS misdetects some AVX-512 VMs and falls back to slow SSE3 kernels
# (mt-serve's note says so); name the core unless the caller did.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=SkylakeX
fi
ex_tmp "${TMPDIR:-/tmp}/mt-demo"
trap 'exit 130' INT TERM
step() { printf '\n== %s\n' "$*"; }
fail() { echo "demo: $*" >&2; exit 1; }
mkdir -p "$OUT" || fail "cannot create $OUT"
rm -f "$OUT"/reply-*.wav

step "1. speech: espeak-ng -> $OUT/speech.wav"
espeak-ng -s 150 -w "$OUT/speech.wav" \
    "Metronome keeps every conversation on time. Each session keeps a few \
sink positions and a window of recent frames, so its memory never grows, \
and the server can tell truthfully how many people it can serve at once." \
    || fail "espeak-ng failed"
soxi "$OUT/speech.wav" 2>/dev/null | grep -E 'Sample Rate|Duration' || true

step "2. mt-serve ($MODEL) with mt-admit in the loop"
# mt-serve --control ctl > lines ; tee ticks.log < lines > lines2 ;
# mt-admit < lines2 > ctl (examples/lib.sh)
ex_admission_loop "$OUT/ticks.log" "$OUT/admit.log" "$OUT/serve.log" 80ms \
    -s "$TMP/mt.sock" -m "$MODEL" || fail "mkfifo failed"
ex_wait_socket "$TMP/mt.sock" 300 "$SERVE"
[ -S "$TMP/mt.sock" ] || { tail -5 "$OUT/serve.log" >&2; fail "mt-serve did not start (log: $OUT/serve.log)"; }
echo "mt-serve pid $SERVE on $TMP/mt.sock; it said:"
head -3 "$OUT/serve.log" | sed 's/^/  /'     # one message a line

step "3. mt-replay: $SESSIONS sessions of the speech, in real time"
"$BIN/mt-replay" -s "$TMP/mt.sock" -n "$SESSIONS" --stagger 400 \
    "$OUT/speech.wav" -o "$OUT/reply-%d.wav" >"$OUT/replay.log" 2>"$OUT/replay.err"
rc=$?
done_n=$(grep -c '^replay_session=[0-9]* state=done' "$OUT/replay.log")
rej_n=$(grep -c '^replay_session=[0-9]* state=rejected' "$OUT/replay.log")
if [ "$done_n" -eq 0 ]; then
    tail -5 "$OUT/replay.err" >&2
    fail "mt-replay: no session completed (exit $rc; log $OUT/replay.log)"
fi
echo "mt-replay: $done_n of $SESSIONS sessions completed; mt-admit refused $rej_n"
if [ "$rej_n" -gt 0 ]; then
    echo "  (refused: admitting them would have pushed the measured latency past"
    echo "   the 80 ms budget on this machine; see $OUT/admit.log)"
fi

# Stop the server; tee and mt-admit end on end of input.
kill "$SERVE" 2>/dev/null
wait "$SERVE" 2>/dev/null
for p in $PIDS; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
done

step "4. mt-probe summarize: the server's tick lines"
"$BIN/mt-probe" summarize --kind tick <"$OUT/ticks.log" || fail "no tick lines"
step "   mt-probe summarize: the client's lines (mt-replay)"
"$BIN/mt-probe" summarize --kind replay_summary <"$OUT/replay.log" || true

step "5. plot"
if "$BIN/mt-probe" plot --ticks "$OUT/ticks.log" -o "$OUT/demo.png" \
    --title "make demo: $SESSIONS sessions of speech through mt-serve + mt-admit"; then
    echo "wrote $OUT/demo.png"
else
    echo "demo: plot skipped (gnuplot missing?)" >&2
fi

step "6. the contrast: bounded vs unbounded cache, the same seeded load"
# SIMULATED: synthetic:moshi-7b on sim:h200-moshi7b (profiles/, mt-profile(5)),
# a 4 GB slice of the pool so that a minute shows it, time-scaled x$CSCALE.
CSCALE=${CSCALE:-3}
CPROFILE=h200-moshi7b
CARGS=(--device "sim:$CPROFILE" -m synthetic:moshi-7b --max-sessions 256 --kv-mem 4000000000)
CLABEL="SIMULATED device, profile $CPROFILE (synthetic:moshi-7b, 4 GB K/V pool slice), time scale x$CSCALE"
echo "$CLABEL"
echo "load: 40 s calls arriving poisson:1/s for 50 s (model time), seed 1; bound: 4 sink + 124 window"
rm -rf "$OUT/contrast"
"$BIN/mt-probe" soak --runs 1 --seed 1 --duration 50s --arrivals poisson:1 \
    --lengths fixed:40s --time-scale "$CSCALE" --data "$OUT/contrast" \
    -- "${CARGS[@]}" --kv window --sink 4 --window 124 \
    -- "${CARGS[@]}" --kv full >"$OUT/contrast.txt" 2>"$OUT/contrast.err" \
    || { tail -3 "$OUT/contrast.err" >&2; fail "mt-probe soak failed (log $OUT/contrast.err)"; }
grep -E '^(# config|window|full)' "$OUT/contrast.txt" | grep -v predicted
echo
printf '%-22s %12s %12s %10s %10s\n' "policy" "truthful met" "naive met" "FILL" "preempted"
for c in 0 1; do
    f=$OUT/contrast/ticks-c$c-r00.log
    [ -s "$f" ] || fail "no tick lines in $f"
    name=$([ $c = 0 ] && echo "window (bounded)" || echo "full (unbounded)")
    awk -v name="$name" '
        /^tick=/ { for (i = 1; i <= NF; i++) { n = index($i, "="); v[substr($i, 1, n - 1)] = substr($i, n + 1) }
                   a = v["out"] + v["fill"]; ans += a; m += v["met"] * a; nm += v["naive_met"] * a
                   fill += v["fill"]; pre += v["preempted"] }
        END { printf "%-22s %11.1f%% %11.1f%% %9.1f%% %10d\n", name, ans ? m / ans : 100,
                     ans ? nm / ans : 100, ans ? 100 * fill / ans : 0, pre }' "$f"
done
echo "(truthful: a frame counts as met only if real audio came back by its"
echo " deadline; naive: silence sent on time counts as met, as dashboards do)"
# One plot: per model second, the K/V pool in use (the slope up to the
# wall) and the deadlines met, truthful beside naive (the cliff).
for c in 0 1; do
    awk -v k="$CSCALE" '
        /^tick=/ { for (i = 1; i <= NF; i++) { n = index($i, "="); v[substr($i, 1, n - 1)] = substr($i, n + 1) }
                   if (t0 == "" && v["active"] > 0) t0 = v["t"]
                   if (t0 == "") next
                   s = int((v["t"] - t0) * k); a = v["out"] + v["fill"]
                   ans[s] += a; m[s] += v["met"] * a; nm[s] += v["naive_met"] * a
                   kv[s] = 100 * v["kv_used"] / (v["kv_used"] + v["kv_free"]); if (s > last) last = s }
        END { for (s = 0; s <= last; s++) if (s in kv)
                  printf "%d %.2f %.2f %.2f\n", s, kv[s], ans[s] ? m[s] / ans[s] : 100, ans[s] ? nm[s] / ans[s] : 100 }' \
        "$OUT/contrast/ticks-c$c-r00.log" >"$OUT/contrast/c$c.dat"
done
if command -v gnuplot >/dev/null; then
    cat >"$OUT/contrast.png.gp" <<GP
set terminal pngcairo size 1000,720 font ",10"
set output "$OUT/contrast.png"
set multiplot layout 2,1 title "The same seeded load, bounded (window) vs unbounded (full) K/V cache\\n$CLABEL"
set xlabel "time since the load started, s (model time)"
set ylabel "K/V pool in use, %"
set yrange [0:105]
set key bottom right
plot "$OUT/contrast/c0.dat" u 1:2 w l lw 2 lc rgb "#1f77b4" t "window: bounded, levels off", \\
     "$OUT/contrast/c1.dat" u 1:2 w l lw 2 lc rgb "#d62728" t "full: grows until the pool is full"
set ylabel "deadlines met, %"
set key bottom left
plot "$OUT/contrast/c0.dat" u 1:3 w l lw 2 lc rgb "#1f77b4" t "window: truthful", \\
     "$OUT/contrast/c1.dat" u 1:3 w l lw 2 lc rgb "#d62728" t "full: truthful (silence is a miss)", \\
     "$OUT/contrast/c1.dat" u 1:4 w l lw 2 dt 2 lc rgb "#ff7f0e" t "full: naive (silence counted as met)"
unset multiplot
GP
    if gnuplot "$OUT/contrast.png.gp"; then echo "wrote $OUT/contrast.png"; else echo "demo: contrast plot failed" >&2; fi
else
    echo "demo: contrast plot skipped (gnuplot missing)" >&2
fi

step "7. a Kyutai-format model: synthetic:kyutai-tiny-mimi with the tiny Mimi"
# Kyutai's LM layout (temporal transformer + depformer, random tiny weights)
# speaking through Mimi: audio in, audio and the text tokens out.
KSOCK=$TMP/ky.sock
"$BIN/mt-serve" -s "$KSOCK" -m synthetic:kyutai-tiny-mimi --max-sessions 4 \
    >"$OUT/kyutai-ticks.log" 2>"$OUT/kyutai-serve.log" &
KSERVE=$!
PIDS="$PIDS $KSERVE"
ex_wait_socket "$KSOCK" 300 "$KSERVE"
[ -S "$KSOCK" ] || { tail -3 "$OUT/kyutai-serve.log" >&2; fail "mt-serve (Kyutai) did not start"; }
grep -o 'kyutai .*' "$OUT/kyutai-serve.log" | head -1
# the tiny presets' SentencePiece model (random weights: random words)
KTOK=$ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model
"$BIN/mt-replay" -s "$KSOCK" -n 2 --duration 5s "$OUT/speech.wav" -o "$OUT/kyutai-reply-%d.wav" \
    -t "$OUT/kyutai-transcript.txt" --tokenizer "$KTOK" --text "$OUT/kyutai-text.txt" \
    >"$OUT/kyutai-replay.log" 2>"$OUT/kyutai-replay.err" \
    || { tail -3 "$OUT/kyutai-replay.err" >&2; fail "mt-replay against the Kyutai model failed"; }
kill "$KSERVE" 2>/dev/null
wait "$KSERVE" 2>/dev/null
grep '^replay_summary=' "$OUT/kyutai-replay.log"
echo "text records: $(grep -c '^replay_text=' "$OUT/kyutai-replay.log"); what each session said"
echo "(the tiny model's weights are random, so are its words):"
sed 's/^\([0-9]*\) /  session \1: /' "$OUT/kyutai-text.txt"
"$BIN/mt-probe" summarize --kind tick <"$OUT/kyutai-ticks.log" | tail -4 || true
echo "wrote $OUT/kyutai-reply-0.wav, $OUT/kyutai-text.txt (SESSION TEXT),"
echo "  $OUT/kyutai-transcript.txt (SESSION SEQ TEXT, one line a frame)"

step "done: files in $OUT"
ls -1 "$OUT" | sed 's/^/  /'
first=$(ls "$OUT"/reply-*.wav 2>/dev/null | head -1)
[ -n "$first" ] && echo "listen: $first (what the server returned for that session)"
exit 0
