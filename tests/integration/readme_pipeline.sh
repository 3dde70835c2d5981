#!/usr/bin/env bash
# readme_pipeline.sh: README.md's operator pipeline, run as printed: the
# block under "A typical operator pipeline" with only its socket path
# (mt.sock, in the current directory) spelt out in full and bin/ pointed
# at the built programs.
# All 16 sessions end done, mt-replay exits 0, the pipeline's own
# `kill %1` ends the server and the controller, and every refusal on the
# way says what the controller was doing in words that agree with it.
# The controller admits by this CPU's measured pace, so how many of the 16
# it admits is the machine's business (a build beside the test halves the
# pace): what holds on any machine is asserted, every session done or
# refused (none failed), one output file a
# session done, mt-replay's exit 0 when all were done and 3 when some were
# refused, and at least one admitted. All 16 done is shown.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-admit mt-replay sox python3
t_fast_blas
README=$MT_ROOT/README.md
block=$(/usr/bin/python3 - "$README" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
i = next(k for k, l in enumerate(lines) if l.startswith("A typical operator pipeline"))
while not lines[i].startswith("    "):
    i += 1
out = []
while i < len(lines) and (lines[i].startswith("    ") or lines[i] == ""):
    if lines[i] == "" and out and not lines[i + 1].startswith("    "):
        break
    out.append(lines[i][4:])
    i += 1
print("\n".join(out))
PY
)
t_check "the README has the pipeline" test -n "$block"
make=$(grep -o 'sox -n -r 24000 talk.wav synth 5$' "$README")
t_check "the README says how to make talk.wav" test -n "$make"
cd "$T_TMP" || exit 1
sox -n -r 24000 talk.wav synth 5 pinknoise
# the README's socket is mt.sock in the current directory (T_TMP here): it
# is spelt out in full so that the processes left behind are found below
# by the test's directory in their command lines
t_check "the pipeline's socket is in the current directory, not a fixed path" \
    sh -c '! printf "%s\n" "$0" | grep -q "/tmp/mt.sock\|/run/mt.sock"' "$block"
script=$(printf '%s\n' "$block" | sed -e "s| mt\.sock| $T_TMP/mt.sock|g" \
    -e "s|bin/mt-|$MT_BIN/mt-|g")
printf '%s\n' "$script" > pipeline.sh
# mt-replay's status is the script's, checked after it: the README's last
# line (kill %1) would hide it.
sed -i "s|^\\($MT_BIN/mt-replay .*\\)$|\\1; echo \"replay_exit=\$?\" >\\&2|" pipeline.sh
sed "s/^/# /" pipeline.sh
timeout -k 5 240 bash pipeline.sh > out.txt 2> err.txt
rc=$?
t_check "the pipeline ends by itself (status $rc)" test $rc -ne 124 -a $rc -ne 137
sum=$(grep '^replay_summary=' out.txt)
t_diag "$sum"
t_check "every session done or refused, none failed" \
    sh -c "echo '$sum' | grep -q '^replay_summary=16 done=[0-9]* rejected=[0-9]* failed=0 '"
ndone=$(echo "$sum" | sed -n 's/.* done=\([0-9]*\).*/\1/p')
t_check "one output file a session done ($ndone)" test "$(ls out/*.wav 2>/dev/null | wc -l)" = "${ndone:-x}"
if echo "$sum" | grep -q ' rejected=0 '; then
    t_check "mt-replay exits 0, every session done $(grep replay_exit err.txt)" grep -q '^replay_exit=0$' err.txt
else
    t_check "mt-replay exits 3 for the refused sessions $(grep replay_exit err.txt)" grep -q '^replay_exit=3$' err.txt
fi
t_check "at least one session admitted and done ($ndone)" test "${ndone:-0}" -ge 1
# Each refusal on the way was one the client waits for by itself.
bad=$(grep '^replay_retry=' out.txt | grep -v 'reason="warming up: ' | head -3)
t_check "every retry followed a warming-up refusal ${bad:0:200}" test -z "$bad"
# A reason with a limit of sessions says a plural only with a plural
t_check "no '1 sessions' in any reason" sh -c "! grep -q '[^0-9]1 sessions' out.txt err.txt"
# A reason that gives the model's prediction gives one past the target.
wrong=$(cat out.txt err.txt | grep -o 'the model puts [0-9]* at [0-9.]* ms, past the [0-9.]* ms target' |
    awk '{ if ($6 + 0 <= $10 + 0) print }' | head -2)
t_check "each prediction named is past its target ${wrong}" test -z "$wrong"
# the pipeline's kill %1 does not wait: give the server and the controller
# up to 10 s to finish going (a busy host schedules their exit late)
for _ in $(seq 100); do
    left=$(pgrep -f "$T_TMP" | tr '\n' ' ')
    [ -z "$left" ] && break
    sleep 0.1
done
t_check "no process left behind ($left)" test -z "$left"
t_done
