#!/usr/bin/env bash
# vectorabi.sh: lists the functions of src/ that take or return a vector
# (util/vec8.h's v8f, v8i, v8u, a v4d or v4f, an __m128/__m256/__m512)
# and are neither always inlined nor compiled for a target of their own.
#
#   tools/vectorabi.sh [DIR...]     (default: src)
#
# Why: the kernels run in x86-64-v3 clones (target_clones) or under a
# target attribute; a helper that takes a vector, compiled for the default
# target, receives it by the default ABI (in memory), while a clone that
# calls it passes it by its own (in a register). Inlined, nothing is
# passed; called, the helper reads garbage. GCC inlines such a helper at
# -O2, not at -O1: on 2026-12-07 Mimi's LayerNorm passed a clean `make
# test` and failed `make asan` (-O1) with its output garbage. Allowed: a
# function marked always_inline (VINLINE), or one with a target attribute
# (directly or through a macro defined in the same file, such as VNNI).
# GCC's -Wpsabi names such a function too, but also every always-inlined
# helper of util/vec8.h, harmless; the build turns it off (-Wno-psabi).
# Each line of output is one breach, "FILE:LINE NAME"; the exit status is
# 1 if there is any.
set -u -o pipefail
[ $# -gt 0 ] || set -- src
command -v python3 >/dev/null || { echo "vectorabi: needs python3" >&2; exit 2; }
find "$@" -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort |
python3 -c '
import re, sys
VEC = r"\b(v8f|v8i|v8u|v8d|v4d|v4f|__m128[id]?|__m256[id]?|__m512[id]?)\b"
def strip(s):
    s = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), s, flags=re.S)
    return re.sub(r"//[^\n]*", "", s)
DEF = re.compile(r"(^|[;}]\s*|\n)([A-Za-z_][\w \t*\n(),\"=.-]*?)\b(\w+)\s*\("
                 r"([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*\{")
bad = 0
for path in sys.stdin.read().split():
    s = strip(open(path, errors="replace").read())
    ok = set(re.findall(r"#define\s+(\w+)\b[^\n]*(?:always_inline|target\s*\()", s)) | {"VINLINE"}
    for m in DEF.finditer(s):
        head, name, params = m.group(2), m.group(3), m.group(4)
        if name in ("if", "for", "while", "switch", "return", "sizeof"):
            continue
        if not re.search(VEC, params) and not re.search(VEC, head):
            continue
        if re.search(r"always_inline|target\s*\(", head):
            continue
        if any(re.search(r"\b%s\b" % k, head) for k in ok):
            continue
        print("%s:%d %s" % (path, s.count("\n", 0, m.start(3)) + 1, name))
        bad += 1
sys.exit(1 if bad else 0)
'
