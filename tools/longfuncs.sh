#!/usr/bin/env bash
# longfuncs.sh: lists the functions of src/ (and kernels/) longer than the
# house rule allows (CONTRIBUTING's "functions under ~100 code lines").
#
#   tools/longfuncs.sh [-a] [-n MAX] [DIR...]     (defaults: src kernels, 100)
#
# A code line is a line of the body, between the function's braces, with
# something left once comments are taken out: blank lines and comment-only
# lines do not count, so a well-commented function is not penalised. Each
# line of output is one breach, "FILE:LINE NAME N", and the exit status is 1
# if there is any. Functions named in ALLOW below are reported only with -a
# (and never fail): each has its reason beside it.
set -u -o pipefail
MAX=100
ALL=0
while getopts an: o; do
    case $o in
    a) ALL=1 ;;
    n) MAX=$OPTARG ;;
    *) echo "usage: tools/longfuncs.sh [-a] [-n MAX] [DIR...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- src kernels

# FILE:NAME, and why it may stay long. FILE is the file's name without its
# folder, so an entry survives a move between stages (decode/ -> speech/).
ALLOW='
attention.cu:attn_split_kernel   a kernel: its phases share registers and barriers (its comment)
'

command -v python3 >/dev/null || { echo "longfuncs: needs python3" >&2; exit 2; }
find "$@" -type f \( -name '*.c' -o -name '*.cu' -o -name '*.h' \) 2>/dev/null | sort |
python3 -c '
import os, re, sys
MAX, ALL = int(sys.argv[1]), sys.argv[2] == "1"
allow = {}
for l in sys.argv[3].splitlines():
    if l.strip():
        k, why = l.split(None, 1)
        allow[k] = why.strip()

def strip(text):
    """Comments, strings and char literals out, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j)); i = j
        elif text.startswith("//", i):
            j = text.find("\n", i); i = n if j < 0 else j
        elif c in "\"\x27":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c + "\n" * text.count("\n", i, j)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)

def fname(h):
    """The name of the function whose head h is (its parameter list is the
    last parenthesis), or None for a struct, an array or an initialiser."""
    if not h.endswith(")") or "=" in h.split("(")[0]:
        return None
    depth = 0
    for i in range(len(h) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(h[i], 0)
        if depth == 0:
            m = re.search(r"([A-Za-z_]\w*)\s*$", h[:i])
            return m.group(1) if m else None
    return None

bad = 0
for path in sys.stdin.read().split():
    lines = strip(open(path, errors="replace").read()).split("\n")
    depth, head, start, name = 0, "", 0, None
    for ln, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            continue
        for ch in line:
            if ch == "{":
                if depth == 0:
                    h = head.strip()
                    name = fname(h)
                    start, code = ln, 0
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and name:
                    body = lines[start:ln - 1]
                    code = sum(1 for b in body if b.strip())
                    if code > MAX:
                        key = os.path.basename(path) + ":" + name
                        if key not in allow:
                            print("%s:%d %s %d" % (path, start, name, code)); bad = 1
                        elif ALL:
                            print("%s:%d %s %d (allowed: %s)" % (path, start, name, code, allow[key]))
                    name = None
                if depth == 0:
                    head = ""
            elif depth == 0:
                if ch == ";":
                    head = ""
                else:
                    head += ch
        if depth == 0:
            head += " "
sys.exit(bad)
' "$MAX" "$ALL" "$ALLOW"
