#!/usr/bin/env bash
# bench_stt.sh: Kyutai's speech-to-text service (issue 53), real-time
# streams through its own protocol (ws://.../api/asr-streaming).
#
# (a) This CPU, measured: mt-serve --ws serves each shape below (f16
#     weights, mt-serve's default) and `mt-probe sweep` over
#     /api/asr-streaming holds each level with real sessions paced on the
#     frame clock. Each row's latencies are the step lateness (each
#     Marker's round trip less the model's 0.5 s delay: the time from a
#     frame's audio leaving the client to the step that consumed it being
#     done, mt-probe(1)); the wall line says how many streams kept its p99
#     under the budget of two frame periods (the tick's wait is up to one).
#     Shapes (stt-1b also with --weights q8): synthetic:kyutai-tiny-stt (a tiny LM on a tiny codec: the
#     server's and the client's own costs, a non-trivial count) and
#     synthetic:stt-1b (Kyutai's stt-1b-en_fr shape, Mimi at 32
#     codebooks). No STT shape lies between them: the other small presets
#     are Moshi's (a depformer), not served on /api/asr-streaming, and the
#     tiny STT LM refuses the published Mimi (its card is 32, Mimi's 2048). Beside them, the frame bound of stt-1b at B = 1 and 2
#     measured in this run (mt-benchkyutai -P: the larger of bytes over the
#     copy bandwidth and FLOPs over sgemm, per stage, summed).
# (b) A SIMULATED H100 (profiles/h100-stt-1b.profile, UNCALIBRATED as its
#     header says): stt-1b's streams per device from the analytic model
#     (mt-probe predict: the largest batch whose frame p99 holds under
#     80 ms, and the sessions the K/V pool holds), beside Kyutai's
#     published 400 real-time streams per H100 (moshi-server, stt-1b). A
#     simulated *sweep* of hundreds of streams cannot run here: a
#     simulated device waits out its model's step, but the Mimi codec of
#     every session still runs on this host's CPU, which carries a few.
# Asserts nothing. STT_HOLD (default 5s) is each level's hold.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
TB=${MT_TESTBIN:-build/tests}
BIN=${MT_BIN:-bin}
bench_need bench_stt "$BIN/mt-serve" "$BIN/mt-probe" "$TB/mt-benchkyutai"
HOLD=${STT_HOLD:-5s}
T=$(mktemp -d /tmp/bench_stt.XXXXXX) || exit 1
SRV=
trap '[ -n "$SRV" ] && kill "$SRV" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
echo "bench_stt: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%FT%TZ) on" \
     "$(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"

echo "--- stt-1b's frame bound on this machine (mt-benchkyutai -P, f16 weights, S=0 W=750)"
"$TB/mt-benchkyutai" -m synthetic:stt-1b -b 1,2 -S 0 -W 750 -w f16 -c synthetic:mimi -P |
    awk '/^frame / { for (i = 1; i <= NF; i++) if ($i ~ /^(B|frame_bound_ms|mimi_enc_bound_ms|temporal_bound_ms|sgemm_gflops|copy_gbs)=/) printf "%s ", $i; print "" }' ||
    exit 1

# serve_sweep NAME FROM TO STEP MT-SERVE-ARGS...: the sweep's table and wall
serve_sweep() {
    local name=$1 from=$2 to=$3 step=$4 url= i=0
    shift 4
    echo "--- $name: mt-serve $* ; mt-probe sweep --from $from --to $to --step $step --hold $HOLD"
    "$BIN/mt-serve" -s "$T/s.sock" --ws 127.0.0.1:0 "$@" >"$T/ticks" 2>"$T/log" &
    SRV=$!
    while [ -z "$url" ] && [ $i -lt 6000 ] && kill -0 "$SRV" 2>/dev/null; do
        url=$(grep -o 'ws://[^ ]*/api/asr-streaming' "$T/log")
        sleep 0.1; i=$((i + 1))
    done
    if [ -z "$url" ]; then
        echo "bench_stt: $name: mt-serve did not come up:" >&2
        tail -5 "$T/log" >&2
        return 1
    fi
    grep -E 'started in|speech-to-text on' "$T/log" | sed 's/^/# /'
    "$BIN/mt-probe" sweep -s "$url" --from "$from" --to "$to" --step "$step" \
        --hold "$HOLD" --warmup 1s
    local rc=$?
    kill -TERM "$SRV"; wait "$SRV" 2>/dev/null; SRV=
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    return $rc
}
serve_sweep "synthetic:kyutai-tiny-stt" 1 41 8 -m synthetic:kyutai-tiny-stt || exit 1
serve_sweep "synthetic:stt-1b (f16 weights)" 1 2 1 -m synthetic:stt-1b || exit 1
# 8-bit weights: the live count issue 49 aims at (4 streams on 2 cores),
# with what was predicted for it first, in this run: the frame's bound
# (mt-benchkyutai -P: per stage the larger of bytes over the copy
# bandwidth and FLOPs over sgemm, summed; mt-serve's K/V, 4 sinks + 256)
# and the step as mt-serve's tick takes it (-L: mt_speech_step, Mimi's
# encode and the LM, 20 frames back to back), each the largest B whose
# figure stays under the 80 ms frame.
echo "--- stt-1b with q8 weights: predicted (the largest B under the 80 ms frame)"
"$TB/mt-benchkyutai" -m synthetic:stt-1b -b 1,2,3,4,5,6 -S 4 -W 256 -w q8 -c synthetic:mimi -P |
    awk '/^frame / { b = 0; f = 0
             for (i = 1; i <= NF; i++) { split($i, kv, "=")
                 if (kv[1] == "B") b = kv[2]; if (kv[1] == "frame_bound_ms") f = kv[2] }
             printf "bound B=%d frame_bound_ms=%s\n", b, f
             if (f + 0 <= 80) n = b }
         END { printf "predicted_at_bound streams=%d\n", n }' | tee "$T/pred" || exit 1
"$TB/mt-benchkyutai" -m synthetic:stt-1b -b 1,2,3,4,5,6 -f 20 -w q8 -c synthetic:mimi -L |
    awk '/^served / { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
             printf "step B=%d enc_ms=%s temporal_ms=%s step_ms=%s step_p99_ms=%s\n", v["B"],
                    v["enc_ms"], v["temporal_ms"], v["step_ms"], v["step_p99_ms"]
             if (v["step_ms"] + 0 <= 80) m = v["B"]
             if (v["step_p99_ms"] + 0 <= 80) p = v["B"] }
         END { printf "predicted_from_step streams=%d (median under 80 ms) %d (p99 under 80 ms)\n", m, p }' |
    tee -a "$T/pred" || exit 1
serve_sweep "synthetic:stt-1b (q8 weights)" 1 6 1 -m synthetic:stt-1b --weights q8 | tee "$T/sweep"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
echo "stt-1b q8 on this machine: $(sed -n 's/^predicted_at_bound streams=\([0-9]*\).*/\1/p' "$T/pred") streams" \
     "predicted at the bound, $(sed -n 's/^predicted_from_step streams=\([0-9]*\).*/\1/p' "$T/pred")" \
     "from the measured step (median), against the sweep's: $(grep -i 'wall' "$T/sweep" | tail -1)"

echo "--- SIMULATED: stt-1b on profiles/h100-stt-1b.profile ($(sed -n 's/^# \(UNCALIBRATED\).*/\1/p' profiles/h100-stt-1b.profile | head -1); h100-moshiko's device figures)"
# The sessions-per-device line takes its memory bound from the profile
# (memory less the reserve, the weights and each session's codec state);
# --kv-mem (required) only sizes predict's own K/V-wall lines, not shown.
"$BIN/mt-probe" predict -m synthetic:stt-1b --kv-mem 37.6e9 --sink 0 --window 750 \
    --codec synthetic:mimi --codebooks 32 --profile profiles/h100-stt-1b.profile \
    --max-sessions 2048 --samples 10 | grep -E 'sim:|SIMULATED' || exit 1
echo "Kyutai's published figure: 400 real-time stt-1b streams per H100 (moshi-server," \
     "batched_asr; their claim, not measured here)"
echo "# a simulated sweep of hundreds of streams is not run: the simulated device waits" \
     "out the model's step, but every session's Mimi codec still runs on this host's CPU"
