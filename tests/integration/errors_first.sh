#!/usr/bin/env bash
# errors_first.sh: a configuration error is said before any work, in one
# line on stderr that names the option or the path the user gave, with the
# documented status (mt-serve(1), mt-probe(1), mt-replay(1)). "Before any
# work" is made visible: mt-serve gets a model that does not exist (-m
# no-such-model), so an error about anything else was found before the
# model was looked at; mt-probe's experiments print no table row, start no
# mt-serve (nothing listens), and mt-replay reads no input (a FIFO no one
# writes would block it).
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-probe mt-replay python3 sox
S=$MT_BIN/mt-serve P=$MT_BIN/mt-probe R=$MT_BIN/mt-replay
cd "$T_TMP" || exit 1
sox -n -r 24000 talk.wav synth 1 sine 300 vol 0.2
mkfifo ctl

# one NAME STATUS PATTERN CMD...: exit STATUS, exactly one stderr line,
# matching PATTERN (grep -E), nothing on stdout
one() {
    local name=$1 want=$2 pat=$3; shift 3
    timeout 30 "$@" >one.out 2>one.err </dev/null
    local rc=$?
    t_check "$name: status $want (got $rc)" test $rc = "$want"
    t_check "$name: one line on stderr ($(wc -l <one.err)): $(head -c 160 one.err)" \
        test "$(wc -l <one.err)" = 1
    t_check "$name: it names what was given" grep -Eq -- "$pat" one.err
    t_check "$name: nothing on stdout" test ! -s one.out
}

M="-m no-such-model"
one "mt-serve -s in a missing directory" 1 '^mt-serve: -s /nonexistent/d/x.sock: directory /nonexistent/d: ' \
    "$S" $M -s /nonexistent/d/x.sock
one "mt-serve -s on a file that is not a socket" 1 '^mt-serve: -s talk.wav: exists and is not a socket$' \
    "$S" $M -s talk.wav
one "mt-serve --control missing" 1 '^mt-serve: --control nofifo: No such file' \
    "$S" $M -s "$T_TMP/a.sock" --control nofifo
one "mt-serve --latency-log in a missing directory" 1 '^mt-serve: --latency-log /nonexistent/l.log: ' \
    "$S" $M -s "$T_TMP/a.sock" --latency-log /nonexistent/l.log
one "mt-serve --agent without a port" 2 '^mt-serve: --agent nope: ' \
    "$S" $M -s "$T_TMP/a.sock" --agent nope
one "mt-serve --listen off loopback without a token" 2 '^mt-serve: --listen 0.0.0.0:0 is not a loopback address' \
    "$S" $M --listen 0.0.0.0:0
# a port in use: a listener of our own holds it
port=$(t_free_port)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
open(sys.argv[2], "w").close(); time.sleep(60)' "$port" held &
HOLD=$!; t_track $HOLD
for _ in $(seq 100); do [ -e held ] && break; sleep 0.1; done
one "mt-serve --listen on a port in use" 1 "^mt-serve: --listen 127.0.0.1:$port: Address already in use\$" \
    "$S" $M -s "$T_TMP/a.sock" --listen 127.0.0.1:$port
# a live server at -s
t_serve live.out live.err -s "$T_TMP/live.sock" -m synthetic:tiny
wait_for_socket "$T_TMP/live.sock" 300
one "mt-serve -s where a server listens" 1 "^mt-serve: -s $T_TMP/live.sock: another server is listening there\$" \
    "$S" $M -s "$T_TMP/live.sock"
kill $SRV
one "mt-serve -m fortune-byte (a text model)" 1 '^mt-serve: -m .*/models/fortune-byte: a text model .*mt-probe quality' \
    "$S" -m "$MT_ROOT/models/fortune-byte" -s "$T_TMP/b.sock"

one "mt-probe sweep --plot in a missing directory" 1 '^mt-probe sweep: --plot /nonexistent/x.png: directory /nonexistent: ' \
    "$P" sweep --to 1 --hold 1s --plot /nonexistent/x.png -- -m synthetic:tiny
one "mt-probe soak --plot in a missing directory" 1 '^mt-probe soak: --plot /nonexistent/x.png: ' \
    "$P" soak --runs 1 --duration 1s --plot /nonexistent/x.png -- -m synthetic:tiny
one "mt-probe soak --data under a missing directory" 1 '^mt-probe soak: --data /nonexistent/d: ' \
    "$P" soak --runs 1 --duration 1s --data /nonexistent/d -- -m synthetic:tiny
one "mt-probe sweep --ticks in a missing directory" 1 '^mt-probe sweep: --ticks /nonexistent/t.log: ' \
    "$P" sweep --to 1 --hold 1s --ticks /nonexistent/t.log -- -m synthetic:tiny
one "mt-probe plot -o in a missing directory" 1 '^mt-probe plot: -o /nonexistent/x.png: directory /nonexistent: ' \
    "$P" plot --ticks live.out -o /nonexistent/x.png
one "mt-probe sweep: mt-serve's own error, not its usage line" 1 'mt-serve: --agent nope: no port' \
    "$P" sweep --to 1 --hold 1s -- -m synthetic:tiny --agent nope
t_check "... and not the usage line" sh -c '! grep -q "usage:" one.err'

one "mt-replay -s a missing socket" 1 '^mt-replay: -s /no/such.sock: No such file or directory' \
    "$R" -s /no/such.sock ctl
one "mt-replay -s a file that is not a socket" 1 '^mt-replay: -s talk.wav: not a socket$' \
    "$R" -s talk.wav talk.wav
one "mt-replay --mic -s a missing socket (nothing said live first)" 1 '^mt-replay: -s /no/such.sock: ' \
    "$R" -s /no/such.sock --mic
# the options of issue 52: --text, and FIFO inputs
# usage NAME PATTERN CMD...: a usage error: exit 2, the first stderr line
# matching PATTERN (then the usage line), nothing on stdout
usage() {
    local name=$1 pat=$2; shift 2
    timeout 30 "$@" >one.out 2>one.err </dev/null
    local rc=$?
    t_check "$name: status 2 (got $rc)" test $rc = 2
    t_check "$name: says it first: $(head -1 one.err | head -c 160)" \
        sh -c 'head -1 one.err | grep -Eq -- "$0"' "$pat"
    t_check "$name: nothing on stdout" test ! -s one.out
}
usage "mt-replay --text without --tokenizer" '^mt-replay: --text needs --tokenizer' \
    "$R" -s /no/such.sock --text t.txt ctl
one "mt-replay --text in a missing directory (no input read)" 1 '^mt-replay: --text /nonexistent/t.txt: directory /nonexistent: ' \
    "$R" -s /no/such.sock --tokenizer "$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model" \
    --text /nonexistent/t.txt ctl
one "mt-replay -t in a missing directory (no input read)" 1 '^mt-replay: -t /nonexistent/t.txt: directory /nonexistent: ' \
    "$R" -s /no/such.sock -t /nonexistent/t.txt ctl
usage "mt-replay --tokenizer alone" '^mt-replay: --tokenizer is for the transcript \(-t FILE or --text FILE\)' \
    "$R" -s /no/such.sock --tokenizer x.model ctl
# an unknown preset names every preset there is (models, Kyutai's, codecs)
one "mt-serve -m synthetic:nope" 1 '^mt-serve: synthetic:nope: unknown synthetic preset' \
    "$S" -s "$T_TMP/c.sock" -m synthetic:nope
for p in synthetic:tiny synthetic:moshi-7b synthetic:moshiko synthetic:kyutai-small \
         synthetic:kyutai-tiny-mimi synthetic:kyutai-tiny-stt synthetic:mimi synthetic:mimi-tiny; do
    t_check "... it lists $p" grep -q "[ (]$p[,;)]" one.err
done
one "mt-serve -m synthetic:kyutai-nope" 1 '^mt-serve: synthetic:kyutai-nope: unknown Kyutai preset.*synthetic:tiny.*synthetic:kyutai-tiny-stt.*synthetic:mimi-tiny\)$' \
    "$S" -s "$T_TMP/c.sock" -m synthetic:kyutai-nope
# each codec named is one: mt-probe codec takes it
sox -n -r 24000 short.wav synth 0.2 sine 300 vol 0.2
for c in synthetic:mimi-tiny; do
    timeout 60 "$P" codec -c "$c" short.wav back.wav >/dev/null 2>codec.err
    t_check "the listed codec $c works (mt-probe codec -c $c) $(head -c 200 codec.err)" test $? = 0
done
t_done
