#!/usr/bin/env bash
# serve_static.sh: mt-serve --static DIR on the --ws port (Kyutai's built
# web client beside /api/chat): index.html at GET /, a .js and a .wasm with
# their content types, HEAD without a body; refused: path traversal (..),
# encoded traversal (%2e%2e, %2F), a symbolic link out of DIR, a huge path,
# methods other than GET and HEAD, a directory (no listing), a hidden
# file; and the chat still answers its WebSocket upgrade.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
PY=/usr/bin/python3
t_need mt-serve
cd "$T_TMP" || exit 1

mkdir -p www/assets www/sub secret
printf '<!doctype html><title>moshi</title>\n' > www/index.html
printf 'console.log("hi");\n' > www/assets/app.js
printf '\0asm\1\0\0\0' > www/assets/dec.wasm
printf 'sub index\n' > www/sub/index.html
printf 'hidden\n' > www/.env
printf 'TOP SECRET\n' > secret/key.txt
ln -s ../secret/key.txt www/link-out.txt
ln -s ../secret www/dir-out
ln -s assets/app.js www/link-in.js

"$S" -s "$T_TMP/s.sock" --ws 127.0.0.1:0 --static www -m synthetic:tiny --device cpu \
    --threads 1 > lat 2> log &
SRV=$!; t_track $SRV
i=0; P=
while [ $i -lt 300 ] && [ -z "$P" ]; do
    P=$(sed -n 's|.*websocket on ws://127\.0\.0\.1:\([0-9]*\)/api/chat.*|\1|p' log); sleep 0.1; i=$((i + 1))
done
t_check "mt-serve --ws --static is up" test -n "$P"
grep -q "static files of www at http://127.0.0.1:$P/ .*worker_addr=127.0.0.1:$P" log
t_ok $? "the start line says where, with the client's worker_addr"

# req METHOD TARGET: the raw answer's status line, Content-Type, body bytes
req() {
    "$PY" - "$P" "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (sys.argv[2], sys.argv[3])).encode("latin-1"))
d = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    d += b
head, _, body = d.partition(b"\r\n\r\n")
lines = head.decode("latin-1").split("\r\n")
ct = [l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("content-type:")]
cl = [l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("content-length:")]
print("%s|%s|%s|%d|%s" % (lines[0].split(" ")[1] if lines[0] else "-", ct[0] if ct else "-",
      cl[0] if cl else "-", len(body), body[:40].decode("latin-1").replace("\n", " ")))
PYEOF
}
is() {   # is METHOD TARGET PATTERN: the answer (status|type|length|body bytes|body)
    local got; got=$(req "$1" "$2")
    echo "$got" >> answers
    t_check "$1 $(printf %.60s "$2")$([ ${#2} -gt 60 ] && echo "... (${#2} bytes)") -> $3 ($(printf %.120s "$got"))" \
        sh -c "case '$got' in $3) exit 0;; esac; exit 1"
}

is GET / "200\|text/html*\|36\|36\|*moshi*"
is GET /index.html "200\|text/html*"
is GET "/?worker_addr=127.0.0.1:$P" "200\|text/html*"
is GET /assets/app.js "200\|text/javascript*\|19\|19\|*console*"
is GET /assets/dec.wasm "200\|application/wasm\|8\|8*"
is HEAD /assets/app.js "200\|text/javascript*\|19\|0\|*"
is GET /sub/ "200\|text/html*\|10\|10\|sub?index*"
is GET /link-in.js "200\|text/javascript*"
is GET /nope.js "404*"
is GET /assets "404*"
is GET /../secret/key.txt "403*"
is GET /assets/../../secret/key.txt "403*"
is GET /%2e%2e/secret/key.txt "403*"
is GET /assets%2F..%2F..%2Fsecret%2Fkey.txt "403*"
is GET /%2E%2E%5Csecret "403*"
is GET /link-out.txt "403*"
is GET /dir-out/key.txt "403*"
is GET /.env "403*"
is GET //etc/passwd "403*"
is GET /index.html%00.js "403*"
is GET "/$(head -c 3000 /dev/zero | tr '\0' a)" "414*"
is GET "/$(head -c 1500 /dev/zero | tr '\0' a)" "414*"
for m in POST PUT DELETE OPTIONS TRACE PATCH; do is $m /index.html "405*"; done
grep -q "TOP SECRET" answers log lat
t_check "the file outside DIR never came back in any answer" [ $? != 0 ]
grep -q "static 127.0.0.1:[0-9]*: GET /link-out.txt: 403" log
t_ok $? "refusals are logged with the path and status"

# the chat is still the chat
up=$(req GET /api/chat)
t_check "GET /api/chat without an upgrade is still the chat's answer ($up)" sh -c "case '$up' in 426*) exit 0;; esac; exit 1"
kill $SRV; wait $SRV 2>/dev/null
"$S" -s "$T_TMP/t.sock" --ws 127.0.0.1:0 --static www/index.html -m synthetic:tiny > /dev/null 2> log2
rc=$?
t_check "--static FILE (not a directory): exit 1 ($(cat log2))" [ $rc = 1 ]
"$S" -s "$T_TMP/t.sock" --static www -m synthetic:tiny > /dev/null 2> log3
t_check "--static without --ws: usage error" [ $? = 2 ]
t_done
