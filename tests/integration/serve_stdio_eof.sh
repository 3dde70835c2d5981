#!/bin/bash
# serve_stdio_eof: mt-serve --stdio when its input ends without END (issue
# 19): EOF is an implicit END (every whole frame read is answered, then
# END), a frame cut short by the EOF is a counted miss and a log line, and
# the exit status is 1 because the stream did not end cleanly.
. "$(dirname "$0")/lib.sh"
t_fast_blas
t_need mt-serve
FC=$MT_TESTBIN/mt-fakeclient
S="$MT_BIN/mt-serve --stdio -m synthetic:tiny --device cpu"
H=56   # MT_FRAME_HEADER_SIZE
timeout 60 "$FC" --emit -f 10 --no-pace >"$T_TMP/f10"
timeout 60 "$FC" --emit -f 11 --no-pace >"$T_TMP/f11"
size10=$(stat -c %s "$T_TMP/f10"); A=$(( $(stat -c %s "$T_TMP/f11") - size10 ))
sumkey() { awk -v k="$1" '/^tick=/{for(i=1;i<=NF;i++) if(index($i, k"=")==1){sub(k"=","",$i); s+=$i}} END{print s+0}' "$2"; }

# no END: 10 whole frames, then EOF
head -c $((size10 - H)) "$T_TMP/f10" | timeout 60 $S 2>"$T_TMP/err1" | \
    timeout 60 "$FC" --read --expect 10 >"$T_TMP/out1"
st=("${PIPESTATUS[@]}")
t_ok "${st[2]}" "no END: all 10 frames answered, then END ($(cat "$T_TMP/out1"))"
t_check "no END: exit 1 (rc ${st[1]})" [ "${st[1]}" = 1 ]
t_check "no END: said so" grep -q 'stdin ended without END' "$T_TMP/err1"
t_check "no END: in=10 miss=0 in the tick lines" \
    [ "$(sumkey in "$T_TMP/err1")/$(sumkey miss "$T_TMP/err1")" = 10/0 ]

# EOF inside the 10th frame
head -c $((size10 - H - A / 2)) "$T_TMP/f10" | timeout 60 $S 2>"$T_TMP/err2" | \
    timeout 60 "$FC" --read --expect 9 >"$T_TMP/out2"
st=("${PIPESTATUS[@]}")
t_ok "${st[2]}" "cut frame: the 9 whole frames answered, then END ($(cat "$T_TMP/out2"))"
t_check "cut frame: exit 1 (rc ${st[1]})" [ "${st[1]}" = 1 ]
t_check "cut frame: a log line" grep -q 'stdin ended inside a frame' "$T_TMP/err2"
t_check "cut frame: in=10 miss=1 in the tick lines ($(sumkey in "$T_TMP/err2")/$(sumkey miss "$T_TMP/err2"))" \
    [ "$(sumkey in "$T_TMP/err2")/$(sumkey miss "$T_TMP/err2")" = 10/1 ]

# the whole stream: exit 0
timeout 60 $S <"$T_TMP/f10" 2>"$T_TMP/err3" | timeout 60 "$FC" --read --expect 10 >/dev/null
st=("${PIPESTATUS[@]}")
t_check "with END: exit 0" [ "${st[0]}" = 0 ]
t_check "with END: in=10 miss=0" [ "$(sumkey in "$T_TMP/err3")/$(sumkey miss "$T_TMP/err3")" = 10/0 ]
# empty input: nothing was promised, exit 0
timeout 60 $S </dev/null >/dev/null 2>"$T_TMP/err4"
t_ok $? "empty input: exit 0"
t_done
