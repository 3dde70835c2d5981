#!/usr/bin/env bash
# replay_retry.sh: sessions that arrive together (mt-replay(1) --retry,
# EXIT STATUS) and outputs checked before connecting. Against mt-serve
# --max-sessions 1, two mt-replay runs at once: without --retry one is
# refused with the plain reason and exits 3 (refused, none failed); with
# --retry both finish, the second after a backoff. A missing output
# directory or an unknown extension fails at once (exit 2) and the server
# never sees a session.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
t_need mt-replay mt-serve sox
cd "$T_TMP" || exit 1

sox -n -r 24000 -c 1 a.wav synth 1.5 sine 440 vol 0.5
t_serve serve.log serve.err -s "$T_TMP/mt.sock" -m synthetic:echo --max-sessions 1
wait_for_socket "$T_TMP/mt.sock" || { t_ok 1 "mt-serve started"; t_done; }

# two at once, no retry: one done (0), one refused (3)
"$R" -s "$T_TMP/mt.sock" --latency none a.wav > r1.txt 2>&1 & p1=$!
"$R" -s "$T_TMP/mt.sock" --latency none a.wav > r2.txt 2>&1 & p2=$!
wait $p1; rc1=$?
wait $p2; rc2=$?
codes=$(printf '%s\n' $rc1 $rc2 | sort | tr '\n' ' ')
t_check "two at once on --max-sessions 1: exit statuses 0 and 3 (got $rc1 $rc2)" \
    test "$codes" = "0 3 "
t_check "the refused one says why in plain words" \
    grep -q 'reason="server at its session limit (1 session, --max-sessions); retry later"' r1.txt r2.txt
t_check "its summary counts it as rejected, not failed" \
    grep -q '^replay_summary=1 done=0 rejected=1 failed=0 ' r1.txt r2.txt

# two at once with --retry: both finish
"$R" -s "$T_TMP/mt.sock" --latency none --retry 6 a.wav > q1.txt 2>&1 & p1=$!
"$R" -s "$T_TMP/mt.sock" --latency none --retry 6 a.wav > q2.txt 2>&1 & p2=$!
wait $p1; rc1=$?
wait $p2; rc2=$?
t_check "with --retry 6 both exit 0 (got $rc1 $rc2)" test "$rc1$rc2" = 00
t_check "both done" sh -c 'grep -q "^replay_summary=1 done=1 rejected=0 failed=0 " q1.txt &&
    grep -q "^replay_summary=1 done=1 rejected=0 failed=0 " q2.txt'
t_check "one of them retried after a refusal (a fresh connection)" \
    grep -q '^replay_retry=0 attempt=2 in_s=[0-9.]* reason="server at its session limit' q1.txt q2.txt
n=$(cat q1.txt q2.txt | grep -c '^replay_session=0 .*state=done')
t_check "each run's session ended done once ($n)" test "$n" = 2

# --retry 1 against a longer session: the backoff (0.125..0.25 s) runs out
sox -n -r 24000 -c 1 long.wav synth 4 sine 440 vol 0.5
"$R" -s "$T_TMP/mt.sock" --latency none long.wav > l1.txt 2>&1 & p1=$!
sleep 0.5
"$R" -s "$T_TMP/mt.sock" --latency none --retry 1 a.wav > l2.txt 2>&1
rc=$?
wait $p1
t_check "retries used up: exit 3, refused twice" \
    sh -c 'test $0 = 3 && test "$(grep -c "^replay_session=0 state=rejected" l2.txt)" = 2 &&
        grep -q "retries=1" l2.txt' $rc

# outputs checked before connecting
before=$(grep -c '^request' serve.log)
"$R" -s "$T_TMP/mt.sock" -o nodir/%d.wav a.wav > o1.txt 2> o1.err
rc=$?
t_check "-o nodir/%d.wav: exit 2 at once" test $rc = 2
t_check "-o nodir/%d.wav: one message naming the directory" \
    sh -c 'grep -q "^mt-replay: -o nodir/0.wav: directory nodir: No such file or directory" o1.err &&
        test "$(wc -l < o1.err)" = 1'
touch afile
"$R" -s "$T_TMP/mt.sock" -o afile/x.wav a.wav > /dev/null 2> o2.err
t_check "-o through a file: exit 2, not a directory" \
    sh -c 'test $0 = 2 && grep -q "afile is not a directory" o2.err' $?
"$R" -s "$T_TMP/mt.sock" -o out.xyz a.wav > /dev/null 2> o3.err
t_check "-o out.xyz: exit 2, unknown extension" \
    sh -c 'test $0 = 2 && grep -q "unsupported output format" o3.err' $?
if [ "$(id -u)" != 0 ]; then
    mkdir ro && chmod 555 ro
    "$R" -s "$T_TMP/mt.sock" -o ro/x.wav a.wav > /dev/null 2> o4.err
    t_check "-o into a read-only directory: exit 2" \
        sh -c 'test $0 = 2 && grep -q "cannot write in directory ro" o4.err' $?
else
    t_skip "root writes anywhere: read-only directory case"
fi
"$R" --play -o nodir/x.wav < /dev/null > /dev/null 2> o5.err
t_check "--play -o nodir/x.wav: exit 2 before reading" \
    sh -c 'test $0 = 2 && grep -q "directory nodir" o5.err' $?
sleep 0.2
after=$(grep -c '^request' serve.log)
t_check "the server saw no session from them ($before -> $after requests)" test "$before" = "$after"
t_done
