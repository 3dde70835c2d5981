#!/usr/bin/env bash
# sim_codec.sh: the simulated device books a Kyutai model's codec, and
# mt-probe predict --codec --profile says the same: mt-serve on a sim
# profile with the tiny Kyutai LM and the tiny Mimi (2 of its codebooks,
# the LM's n_q - dep_q) states the codec's bytes booked and its time per
# session-frame and per step; predict prints the same figures from the
# same profile, the same codec and --max-sessions; the K/V pool is the
# profile's budget less that booking. Without the codec's figures the pool
# would be larger by exactly the booking.
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-probe
S=$MT_BIN/mt-serve
P=$MT_BIN/mt-probe
cd "$T_TMP" || exit 1
cat > dev.profile <<'PROF'
name = codec-test
memory_bytes = 2e9
reserve_bytes = 1e9
bandwidth = 1e12
matrix_rate = 1e14
weight_bytes = 2
kv_bytes = 2
codec_rate = 1e9
codec_overhead_us = 500
PROF

nice -n 10 "$S" -s "$T_TMP/mt.sock" -m synthetic:kyutai-tiny-mimi --device "sim:$T_TMP/dev.profile" \
    --max-sessions 4 > ticks 2> serve.err &
pid=$!
t_track $pid
wait_for_socket "$T_TMP/mt.sock"
kill -TERM $pid 2>/dev/null
wait $pid 2>/dev/null
note=$(grep 'SIMULATED device sim:codec-test' serve.err)
t_check "startup note names the simulated device $(head -c 300 serve.err)" [ -n "$note" ]
booked=$(sed -n 's/.*, codec \([0-9]*\) B booked (\([0-9]*\) B of weights + 4 sessions x \([0-9]*\) B of state), \([0-9.e+-]*\) ms a session-frame + \([0-9.e+-]*\) ms a step.*/\1 \2 \3 \4 \5/p' serve.err)
t_check "the note states the codec's booking and time: '$booked'" [ -n "$booked" ]
read -r b_all b_w b_s b_ms b_over <<< "$booked"
state=$(sed -n 's/.* + codec state \([0-9]*\) = .*/\1/p' serve.err)
t_check "the booked state ($b_s) is the startup report's codec state ($state)" [ "$b_s" = "$state" ]
t_check "the startup report states the codec's compute a session-frame" \
    grep -Eq 'codec compute [0-9.e+-]+ GFLOP a session-frame \(encode [0-9.e+-]+ \+ decode [0-9.e+-]+\)' serve.err
t_check "booked = weights + 4 x state ($b_all = $b_w + 4 x $b_s)" [ "$b_all" = $((b_w + 4 * b_s)) ]

"$P" predict --kv-mem 1M --codec synthetic:mimi-tiny --codebooks 2 --profile "$T_TMP/dev.profile" \
    --max-sessions 4 > predict.out 2> predict.err
t_check "mt-probe predict --codec --profile runs $(head -c 300 predict.err)" [ $? = 0 ]
p_book=$(sed -n 's/^codec on sim:codec-test booked\t\([0-9]*\) B for 4 sessions (\([0-9]*\) B of weights + 4 x \([0-9]*\) B of state)$/\1 \2 \3/p' predict.out)
t_check "predict books what the server booked ('$p_book' vs '$b_all $b_w $b_s')" [ "$p_book" = "$b_all $b_w $b_s" ]
p_time=$(sed -n 's/^codec on sim:codec-test time\t\([0-9.e+-]*\) ms a session-frame at 1e+09 flop\/s + \([0-9.e+-]*\) ms a step; .*/\1 \2/p' predict.out)
t_check "predict's codec time is the server's ('$p_time' vs '$b_ms $b_over')" [ "$p_time" = "$b_ms $b_over" ]

# the pool: 2e9 - LM weights x 2 - 1e9 - booking, from the note's figures
pool=$(sed -n 's/.*K\/V pool \([0-9]*\) B.*/\1/p' serve.err)
wts=$(sed -n 's/.*B\/s, [0-9.e+]* flop\/s, \([0-9]*\) B of weights.*/\1/p' serve.err)
t_check "K/V pool ($pool) = 2e9 - 1e9 - LM weights ($wts) - codec booking ($b_all), to the byte" \
    /usr/bin/python3 -c "import sys; sys.exit(0 if 2000000000 - 1000000000 - $wts - $b_all == $pool else 1)"
# the depformer: without depformer_params the host computes it; with them
# the profile times it and the host does no depformer work (not counted
# twice), and the note says so
t_check "no depformer_params: the depformer on the host" grep -q "depformer on host" serve.err
{ cat dev.profile; echo "depformer_params = 4e6"; echo "depformer_overhead_us = 300"; } > dep.profile
sed -i 's/^name = codec-test/name = dep-test/' dep.profile
nice -n 10 "$S" -s "$T_TMP/mt2.sock" -m synthetic:kyutai-tiny-mimi --device "sim:$T_TMP/dep.profile" \
    --max-sessions 4 > ticks2 2> serve2.err &
pid=$!
t_track $pid
wait_for_socket "$T_TMP/mt2.sock"
kill -TERM $pid 2>/dev/null
wait $pid 2>/dev/null
t_check "depformer_params: the depformer is the simulated one $(grep -o 'depformer on [a-z]*' serve2.err)" \
    grep -q "depformer on sim" serve2.err
t_check "the note states the depformer's parameters and its time at B=1" \
    grep -q "depformer 4e+06 parameters, [0-9.e+-]* ms a step of one session" serve2.err
t_done
