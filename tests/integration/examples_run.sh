#!/usr/bin/env bash
# examples_run.sh: every script in examples/ runs with short settings (its
# own knobs, the ones its header names) and must end by itself, with
# status 0, inside a time limit, and leave no process behind: each runs in
# a process group of its own, and after it ends nothing may be left in
# that group. paper.sh is run by paper_quick.sh (--quick); a new script
# that neither test runs fails the first check.
# lane: light, long (it mostly waits, for minutes: make test starts it first among the light tests)
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-replay mt-probe mt-admit sox espeak-ng gnuplot
t_fast_blas
EX=$MT_ROOT/examples
# NAME|SECONDS|SETTINGS (environment assignments)
RUNS='admission.sh|60|N=3 DURATION=3 MODEL=synthetic:tiny
collapse.sh|90|RUNS=1 DURATION=4s MODEL=synthetic:tiny
demo.sh|120|SESSIONS=2 CSCALE=10 MODEL=synthetic:tiny
fleet.sh|90|N=6 DUR=4 DRAIN_AT=2 KILL_AT=3
models.sh|240|RUNS=1 MODELS=llama-3.2-1b SAMPLES=40 RESULTS=-
plots.sh|60|HOLD=1s
replay.sh|60|N=2
soak.sh|60|RUNS=1 DURATION=3s
sweep.sh|60|TO=2 HOLD=1s MODEL=synthetic:tiny'
OTHER='lib.sh paper.sh'   # sourced by the others; run by paper_quick.sh
untested=""
for f in "$EX"/*.sh; do
    b=$(basename "$f")
    printf '%s\n' "$RUNS" | grep -q "^$b|" && continue
    case " $OTHER " in *" $b "*) continue ;; esac
    untested="$untested $b"
done
t_check "every example is run by a test (not:$untested)" test -z "$untested"
# each script that is run (not lib.sh, which is sourced) has its run bit
noexec=""
for f in "$EX"/*.sh; do
    [ "$(basename "$f")" = lib.sh ] || [ -x "$f" ] || noexec="$noexec $(basename "$f")"
done
t_check "every example script is executable (not:$noexec)" test -z "$noexec"
command -v haproxy >/dev/null || t_diag "haproxy not installed: fleet.sh skipped"
while IFS='|' read -r name secs settings; do
    if [ "$name" = fleet.sh ] && ! command -v haproxy >/dev/null; then
        t_skip "$name: haproxy not installed"; continue
    fi
    out=$T_TMP/out/${name%.sh}
    # timeout makes itself a process group leader: the group is its pid.
    env $settings OUT="$out" TMPDIR="$T_TMP" MT_BIN="$MT_BIN" MT_ROOT="$MT_ROOT" \
        timeout -k 5 "$secs" bash "$EX/$name" >"$T_TMP/$name.out" 2>"$T_TMP/$name.err" &
    pid=$!
    t0=$(date +%s.%N)
    wait $pid
    rc=$?
    t_diag "$name: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
    [ $rc -eq 0 ] || { sed 's/^/#   /' "$T_TMP/$name.err" | tail -8; }
    t_check "$name ($settings) exits 0 by itself within $secs s (status $rc)" test $rc -eq 0
    # a process of the group may still be on its way out (on a loaded
    # host one was listed 0.3 s after its script had exited, 2026-12-07):
    # up to 5 s for the group to empty; one still there is left behind,
    # and what it is goes to the log
    left=""
    for _ in $(seq 50); do
        left=$(pgrep -g "$pid" 2>/dev/null | tr '\n' ' ')
        [ -n "$left" ] || break
        sleep 0.1
    done
    [ -z "$left" ] || ps -o pid,stat,etime,args -p "$(echo $left | tr " " ",")" 2>/dev/null | sed "s/^/#   /"
    t_check "$name leaves no process behind ($left)" test -z "$left"
    [ -z "$left" ] || kill -9 $left 2>/dev/null
done <<<"$RUNS"
# make demo's output as a user reads it (issue 52): the server's start
# messages one a line, and the Kyutai model's text as words (the tiny
# tokenizer of tests/fixtures), not token ids
d=$T_TMP/demo.sh.out
t_check "demo: no line holds two of mt-serve's messages" \
    sh -c '! grep -q "mt-serve:.*mt-serve:" "$0"' "$d"
t_check "demo: mt-serve's start messages each on its own line" \
    grep -q '^  mt-serve: ' "$d"
t_check "demo: step 7 prints what each session said, as text" \
    grep -Eq '^  session 0: [^0-9 ]' "$d"
t_done
