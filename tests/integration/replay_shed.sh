#!/usr/bin/env bash
# replay_shed.sh: a session the server sheds (a controller's `shed ID
# reason`) is reported by mt-replay as shed, with the server's reason (it
# travels in the END frame), on stderr and in its records, and mt-replay
# exits 4, its status for a shed session. The test is the controller: it
# answers mt-serve's request line with accept, then sheds the session.
. "$(dirname "$0")/lib.sh"
t_serve_test mt-replay sox
cd "$T_TMP" || exit 1
sox -n -r 24000 talk.wav synth 6 sine 300 vol 0.2
mkfifo ctl out
# read-write opens: a FIFO opened so does not wait for its other end
exec 3<>ctl 4<>out
t_serve out srv.err -s "$SOCK" -m synthetic:tiny --control ctl
wait_for_socket "$SOCK" 300
t_check "mt-serve is up" test -S "$SOCK"
"$MT_BIN/mt-replay" -s "$(t_endpoint "$SOCK")" talk.wav >replay.out 2>replay.err &
RP=$!; t_track $RP
id=""
while read -r -t 20 line <&4; do
    case $line in
        request\ *) id=$(printf '%s\n' "$line" | sed -n 's/.*session=\([0-9]*\).*/\1/p'); break ;;
    esac
done
t_check "mt-serve asked about the session ($id)" test -n "$id"
echo "accept $id" >&3
# the session streams a while, then is shed
n=0
while read -r -t 20 line <&4; do
    case $line in tick=*) n=$((n + 1)); [ $n -ge 10 ] && break ;; esac
done
echo "shed $id capacity fell to 0 sessions (a test)" >&3
cat <&4 >/dev/null &
DRAIN=$!; t_track $DRAIN
wait $RP
rc=$?
t_check "mt-replay exits 4 for a shed session (got $rc)" test $rc = 4
t_check "stderr says it was shed, with the server's reason: $(head -c 200 replay.err)" \
    grep -q '^mt-replay: session 0: shed by the server: capacity fell to 0 sessions (a test)$' replay.err
t_check "its replay_session record: state=shed and the reason" \
    grep -q '^replay_session=0 state=shed .*reason="capacity fell to 0 sessions (a test)"' replay.out
t_check "the summary counts it shed, not done or failed" \
    grep -q '^replay_summary=1 done=0 rejected=0 failed=0 .* shed=1$' replay.out
t_check "a replay_rejected=shed record names it" \
    grep -q '^replay_rejected=shed session=0 reason="capacity fell' replay.out
exec 3>&-
t_done
