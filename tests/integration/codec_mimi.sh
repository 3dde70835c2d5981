#!/usr/bin/env bash
# codec_mimi.sh: `mt-probe codec` (Kyutai's Mimi on a file): real speech
# (espeak-ng) through synthetic:mimi and back, every frame accounted for
# (frames in = frames out, samples out = samples in); encode then decode
# equal to the round trip; a last partial frame padded and said; hostile
# codes files and contradictory options refused with a clear message.
. "$(dirname "$0")/lib.sh"
t_need mt-probe
P=$MT_BIN/mt-probe

# 1. speech through the published shape (synthetic weights)
if command -v espeak-ng >/dev/null; then
    espeak-ng -w "$T_TMP/hello.wav" "Hello there." 2>/dev/null
    out=$("$P" codec -c synthetic:mimi "$T_TMP/hello.wav" "$T_TMP/back.raw" 2>"$T_TMP/err")
    t_check "speech round trip through synthetic:mimi: exit 0" [ $? = 0 ]
    t_diag "$out"
    val() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$out"; }
    fin=$(val frames_in); fout=$(val frames_out); sin=$(val samples_in); sout=$(val samples_out)
    [ -n "$fin" ] && [ "$fin" = "$fout" ] && [ "$fin" -gt 5 ]
    t_ok $? "speech: frames in ($fin) = frames out ($fout), more than 5"
    t_check "speech: every frame accounted for (frames = ceil(samples / 1920))" \
        [ "$fin" = $(( (sin + 1919) / 1920 )) ]
    t_check "speech: samples out ($sout) = samples in ($sin)" [ "$sout" = "$sin" ]
    t_check "speech: the output file holds them (16-bit raw)" [ "$(stat -c %s "$T_TMP/back.raw")" = $((2 * sin)) ]
else
    t_skip "espeak-ng not installed"
fi

# 2. the tiny shape: a 3.05-frame input, encode + decode = round trip
python3 - "$T_TMP/in.wav" <<'PY'
import math, struct, sys, wave
n = 1920 * 3 + 100
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.03) * math.sin(i * 0.0007))) for i in range(n)))
w.close()
PY
C=synthetic:mimi-tiny
out=$("$P" codec -c $C "$T_TMP/in.wav" "$T_TMP/rt.raw")
t_check "tiny round trip: exit 0" [ $? = 0 ]
t_check "partial last frame padded and said: frames_in=4 padded=1820" grep -q "frames_in=4 frames_out=4 samples_in=5860 samples_out=5860 padded=1820" <<<"$out"
"$P" codec -c $C --encode "$T_TMP/in.wav" "$T_TMP/codes.txt" >/dev/null
t_check "encode: exit 0" [ $? = 0 ]
t_check "codes file: a header and one line per frame" [ "$(grep -vc '^#' "$T_TMP/codes.txt")" = 4 ]
t_check "codes file: 4 codes a line (the tiny codec's codebooks)" [ "$(awk '!/^#/ {print NF}' "$T_TMP/codes.txt" | sort -u)" = 4 ]
"$P" codec -c $C --decode "$T_TMP/codes.txt" "$T_TMP/dec.raw" >/dev/null
t_check "decode: exit 0" [ $? = 0 ]
t_check "encode then decode = the round trip, byte for byte" cmp -s "$T_TMP/rt.raw" "$T_TMP/dec.raw"
"$P" codec -c $C -n 2 --encode "$T_TMP/in.wav" "$T_TMP/c2.txt" >/dev/null
t_check "-n 2: two codes a line, the first two of the four" \
    [ "$(awk '!/^#/ {print $1, $2}' "$T_TMP/codes.txt")" = "$(awk '!/^#/ {print $1, $2}' "$T_TMP/c2.txt")" ]

# 3. hostile codes files: clear errors, exit 1
bad() {   # bad NAME CONTENT PATTERN
    printf "$2" >"$T_TMP/bad.txt"
    "$P" codec -c $C --decode "$T_TMP/bad.txt" "$T_TMP/bad.raw" >"$T_TMP/out" 2>"$T_TMP/err"
    local rc=$?
    [ $rc = 1 ] && grep -q -- "$3" "$T_TMP/err"
    t_ok $? "$1: exit 1 with '$3'"
}
bad "code out of range" '1 2 3 32\n' 'bad.txt:1: code 32 outside 0..31'
bad "negative code" '1 -2 3 4\n' 'outside 0..31'
bad "a short line" '1 2 3 4\n1 2 3\n' 'bad.txt:2: 3 codes, expected 4'
bad "not a number" '1 2 x 4\n' 'not an integer code'
bad "no frames" '# mimi codes codebooks=4\n' 'no frames of codes'
bad "too many codebooks for the codec" '1 2 3 4 5\n' 'codebooks: 5 is outside 1..4'
# a header after the first frames must not change their width (it made
# the rows after it overrun the buffer; found by fuzz_codes)
bad "codebooks= after frames of another width" "1\\n# codebooks=4\\n$(printf '1 2 3 4\\n%.0s' $(seq 100))" \
    'bad.txt:2: codebooks=4 after frames of 1 codes'
head -c 3000 /dev/urandom >"$T_TMP/bad.txt"
"$P" codec -c $C --decode "$T_TMP/bad.txt" "$T_TMP/bad.raw" >/dev/null 2>"$T_TMP/err"
[ $? = 1 ] && [ "$(wc -l <"$T_TMP/err")" = 1 ]
t_ok $? "random bytes as codes: exit 1, one message"
t_check "nothing written after a refusal" [ ! -e "$T_TMP/bad.raw" ]

# 3b. the codec's share in mt-probe predict
# f32 K/V named: 8.5 MiB a session, 7 in 64M (the f16 default would hold 15)
out=$("$P" predict -m synthetic:small --kv-mem 64M --kv-dtype f32 --duration 10s --codec synthetic:mimi 2>&1)
t_check "predict --codec: the codec's state per session (16480832 bytes)" grep -q "codec per-session state.*(16480832)" <<<"$out"
t_check "predict --codec: at the bounded capacity of 7" grep -q "codec at bounded capacity.*for 7 sessions" <<<"$out"
"$P" predict -m synthetic:small --kv-mem 64M --codec "$T_TMP/none" >"$T_TMP/out" 2>"$T_TMP/err"
[ $? = 1 ] && [ ! -s "$T_TMP/out" ] && grep -q -- "--codec" "$T_TMP/err"
t_ok $? "predict --codec with no such codec: exit 1 before any output"

# 4. usage
"$P" codec -c $C --encode --decode a b >/dev/null 2>&1
t_check "--encode with --decode: exit 2" [ $? = 2 ]
"$P" codec "$T_TMP/in.wav" "$T_TMP/x.raw" >/dev/null 2>&1
t_check "no -c: exit 2" [ $? = 2 ]
"$P" codec -c synthetic:nope "$T_TMP/in.wav" "$T_TMP/x.raw" >/dev/null 2>"$T_TMP/err"
[ $? = 1 ] && grep -q "synthetic:nope" "$T_TMP/err"
t_ok $? "unknown synthetic codec: exit 1, named"

# 5. the backend switch
out=$("$P" codec -c $C --backend cpu "$T_TMP/in.wav" "$T_TMP/rt-cpu.raw")
t_check "--backend cpu: said on the line" grep -q "frames_out=4 .*backend=cpu" <<<"$out"
t_check "--backend cpu: the default's output" cmp -s "$T_TMP/rt.raw" "$T_TMP/rt-cpu.raw"
"$P" codec -c $C --backend gpu "$T_TMP/in.wav" "$T_TMP/x.raw" >/dev/null 2>"$T_TMP/err"
[ $? = 2 ] && grep -q "not cpu or cuda" "$T_TMP/err"
t_ok $? "--backend gpu: exit 2, the choices named"
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    t_skip "--backend cuda refusal without a GPU: this machine has one (test_mimi_cuda checks it)"
else
    "$P" codec -c $C --backend cuda "$T_TMP/in.wav" "$T_TMP/x.raw" >/dev/null 2>"$T_TMP/err"
    [ $? = 1 ] && [ "$(wc -l <"$T_TMP/err")" = 1 ] && grep -qi "cuda" "$T_TMP/err" && [ ! -e "$T_TMP/x.raw" ]
    t_ok $? "--backend cuda without a GPU: exit 1, one message, nothing written ($(cat "$T_TMP/err"))"
fi
# 7. float output (sox's habits): -e floating-point writes a WAV of IEEE
# floats, .f32 raw floats by its extension; the same samples as the 16-bit
# output to within its rounding, and finer than it
"$P" codec -c $C -e floating-point "$T_TMP/in.wav" "$T_TMP/rtf.wav" >/dev/null 2>"$T_TMP/err"
t_check "-e floating-point: exit 0 $(cat "$T_TMP/err")" [ $? = 0 ]
"$P" codec -c $C "$T_TMP/in.wav" "$T_TMP/rtf.f32" >/dev/null 2>"$T_TMP/err"
t_check ".f32 by its extension: exit 0 $(cat "$T_TMP/err")" [ $? = 0 ]
"$P" codec -c $C -e floating-point -b 64 "$T_TMP/in.wav" "$T_TMP/rtd.wav" >/dev/null
t_check "-e floating-point -b 64: exit 0" [ $? = 0 ]
cmp=$(python3 - "$T_TMP/rtf.wav" "$T_TMP/rtf.f32" "$T_TMP/rt.raw" "$T_TMP/rtd.wav" <<'PY'
import struct, sys
def wav(path):
    d = open(path, "rb").read()
    i, fmt, data = 12, None, None
    while i + 8 <= len(d):
        cid, n = d[i:i + 4], struct.unpack_from("<I", d, i + 4)[0]
        if cid == b"fmt ":
            fmt = struct.unpack_from("<HHIIHH", d, i + 8)
        elif cid == b"data":
            data = d[i + 8:i + 8 + n]
        i += 8 + n + (n & 1)
    return fmt, data
(tag, ch, rate, _, _, bits), data = wav(sys.argv[1])
f = struct.unpack("<%df" % (len(data) // 4), data)
raw = open(sys.argv[2], "rb").read()
g = struct.unpack("<%df" % (len(raw) // 4), raw)
s16 = open(sys.argv[3], "rb").read()
s = struct.unpack("<%dh" % (len(s16) // 2), s16)
(tag64, _, _, _, _, bits64), d64 = wav(sys.argv[4])
h = struct.unpack("<%dd" % (len(d64) // 8), d64)
off = max(abs(x * 32768 - y) for x, y in zip(f, s) if abs(x) < 0.99)
frac = sum(1 for x in f if abs(x * 32768 - round(x * 32768)) > 1e-3)
print("tag=%d bits=%d rate=%d n=%d nraw=%d n16=%d same_raw=%d max_off=%.3f fractional=%d "
      "tag64=%d bits64=%d same64=%d" % (tag, bits, rate, len(f), len(g), len(s), f == g, off, frac,
      tag64, bits64, max(abs(a - b) for a, b in zip(f, h)) < 1e-6))
PY
)
t_diag "$cmp"
t_check "the WAV is IEEE float (format 3), 32 bits, 24 kHz" grep -q "tag=3 bits=32 rate=24000" <<<"$cmp"
t_check "... as many samples as the 16-bit output, the .f32 the same floats" \
    grep -q "n=5860 nraw=5860 n16=5860 same_raw=1" <<<"$cmp"
t_check "... each within the 16-bit rounding of the 16-bit one" \
    awk -v x="$(sed 's/.*max_off=\([0-9.]*\).*/\1/' <<<"$cmp")" 'BEGIN { exit !(x <= 0.5001) }'
t_check "... and finer than 16 bits (most samples between two 16-bit steps)" \
    awk -v x="$(sed 's/.*fractional=\([0-9]*\).*/\1/' <<<"$cmp")" 'BEGIN { exit !(x > 2930) }'
t_check "-b 64: doubles (format 3, 64 bits), the same values" grep -q "tag64=3 bits64=64 same64=1" <<<"$cmp"
"$P" codec -c $C -e floating-point "$T_TMP/in.wav" "$T_TMP/x.flac" >/dev/null 2>"$T_TMP/err"
[ $? = 1 ] && grep -q "cannot hold that encoding" "$T_TMP/err" && [ ! -e "$T_TMP/x.flac" ]
t_ok $? "-e floating-point to .flac: refused, nothing written ($(cat "$T_TMP/err"))"
"$P" codec -c $C -e floating-point -b 16 "$T_TMP/in.wav" "$T_TMP/x.wav" >/dev/null 2>&1
t_check "-e floating-point -b 16: usage error (exit 2)" [ $? = 2 ]
"$P" codec -c $C -e float "$T_TMP/in.wav" "$T_TMP/x.wav" >/dev/null 2>&1
t_check "-e float (not sox's name): usage error (exit 2)" [ $? = 2 ]
t_done
