#!/usr/bin/env bash
# lint_checks.sh: rejects a check helper (t_check, t_todo, t_ok, t_at_most,
# t_above, t_png) followed by &&, || or |. `t_check NAME cmd1 && cmd2` runs
# only cmd1 under the check: t_check returns 0 either way, so cmd2 runs
# outside it and its result is lost. One command per check: `[ a -a b ]`,
# `sh -c '... && ...'`, or two checks. The lint reads the scripts as the
# shell splits them (quotes, $( ), backslash-newlines, comments), so an
# && inside a quoted `sh -c` string is allowed. It is first run on planted
# misuses, which it must each find, then on every script of the tree.
. "$(dirname "$0")/lib.sh"
t_need /usr/bin/python3

LINT=$T_TMP/lint.py
cat >"$LINT" <<'PY'
import sys

HELPERS = {"t_check", "t_todo", "t_ok", "t_at_most", "t_above", "t_png"}
LEAD = {"then", "do", "else", "elif", "if", "while", "until", "{", "(", "!",
        "time"}
BAD = {"&&", "||", "|"}


def commands(text):
    """Yields (line, words, operator) for each simple command: its first
    line, its top-level words, and the operator that ends it."""
    i, n, line = 0, len(text), 1
    words, cur, start = [], "", None

    def skip_group(j, close, lno):
        # j after the opening: returns the index after the matching close
        depth = 1
        while j < n and depth:
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if c == "\n":
                lno[0] += 1
            if c == "'" and close != "`":
                k = text.find("'", j + 1)
                k = n if k < 0 else k
                lno[0] += text.count("\n", j, k)
                j = k + 1
                continue
            if c == '"':
                j = skip_dq(j + 1, lno)
                continue
            if text.startswith("$(", j):
                j = skip_group(j + 2, ")", lno)
                continue
            if close == ")" and c == "(":
                depth += 1
            elif c == close:
                depth -= 1
            j += 1
        return j

    def skip_dq(j, lno):
        while j < n and text[j] != '"':
            if text[j] == "\\":
                j += 2
                continue
            if text.startswith("$(", j):
                j = skip_group(j + 2, ")", lno)
                continue
            if text[j] == "`":
                j = skip_group(j + 1, "`", lno)
                continue
            if text[j] == "\n":
                lno[0] += 1
            j += 1
        return j + 1

    def flush(op):
        nonlocal words, cur, start
        if cur:
            words.append(cur)
        if words:
            yield_list.append((start, words, op))
        words, cur, start = [], "", None

    yield_list = []
    lno = [line]
    while i < n:
        c = text[i]
        if start is None and not c.isspace():
            start = lno[0]
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                lno[0] += 1
            else:
                cur += text[i:i + 2]
            i += 2
            continue
        if c == "#" and not cur:
            k = text.find("\n", i)
            i = n if k < 0 else k
            continue
        if c == "'":
            k = text.find("'", i + 1)
            k = n if k < 0 else k
            lno[0] += text.count("\n", i, k)
            cur += text[i:k + 1]
            i = k + 1
            continue
        if c == '"':
            j = skip_dq(i + 1, lno)
            cur += text[i:j]
            i = j
            continue
        if text.startswith("$(", i):
            j = skip_group(i + 2, ")", lno)
            cur += text[i:j]
            i = j
            continue
        if c == "`":
            j = skip_group(i + 1, "`", lno)
            cur += text[i:j]
            i = j
            continue
        for op in ("&&", "||", ";;", "|", ";", "&", "\n"):
            if text.startswith(op, i):
                if op == "&" and cur.endswith((">", "<")):
                    cur += c        # 2>&1: a redirection, not an operator
                    i += 1
                    break
                flush(op)
                if op == "\n":
                    lno[0] += 1
                i += len(op)
                break
        else:
            if c.isspace():
                if cur:
                    words.append(cur)
                    cur = ""
            else:
                cur += c
            i += 1
    flush("")
    return yield_list


bad = 0
for path in sys.argv[1:]:
    with open(path, errors="replace") as f:
        text = f.read()
    for lno, words, op in commands(text):
        w = [x for x in words]
        while w and w[0] in LEAD:
            w = w[1:]
        if w and w[0] in HELPERS and op in BAD:
            print("%s:%d: %s ... %s: only the first command is checked"
                  % (path, lno, w[0], op))
            bad += 1
sys.exit(1 if bad else 0)
PY

# planted: each line of bad.sh must be reported, none of good.sh
# (written with a leading @, taken off below, so that no other reader of
# the tree mistakes these planted lines for real checks)
cat >"$T_TMP/bad.sh.in" <<'EOF'
@t_check "a" [ 1 = 1 ] && grep -q x f
@t_check "b" test 1 = 1 || echo no
@t_check "c" true | cat
    @t_todo "why" "d" true && false
if true; then t_check "e" true && false; fi
@t_check "f" sh -c 'x' \
    && false
@t_check "g" test "$(echo a | tr a b)" = b && false
@t_at_most "h" 1 2 && false
EOF
sed 's/^\([[:space:]]*\)@/\1/' "$T_TMP/bad.sh.in" >"$T_TMP/bad.sh"
cat >"$T_TMP/good.sh" <<'EOF'
t_check "a" sh -c 'test 1 = 1 && grep -q x f'
t_check "b" [ 1 = 1 -a 2 = 2 ]
t_check "c" test "$(echo a | tr a b)" = b
t_check "d" test "x && y" = z
[ -x f ] && t_check "e" true
t_check "f" sh -c "a &&
    b"
t_check "g" true 2>&1
x=1 # t_check "h" true && false
t_check "i" true; false
EOF
/usr/bin/python3 "$LINT" "$T_TMP/bad.sh" >"$T_TMP/bad.out"
rc=$?
sed 's/^/# /' "$T_TMP/bad.out"
t_check "the lint fails on planted misuses" test $rc = 1
t_check "it reports each of the 8 planted lines" test "$(wc -l <"$T_TMP/bad.out")" = 8
/usr/bin/python3 "$LINT" "$T_TMP/good.sh" >"$T_TMP/good.out"
rc=$?
sed 's/^/# /' "$T_TMP/good.out"
t_check "the lint passes one-command checks (&& inside quotes, 2>&1, a guard before)" test $rc = 0

cd "$MT_ROOT" || exit 1
/usr/bin/python3 "$LINT" tests/integration/*.sh examples/*.sh bench/*.sh >"$T_TMP/tree.out"
rc=$?
sed 's/^/# /' "$T_TMP/tree.out"
t_check "no check helper followed by &&, || or | in tests/, examples/, bench/" test $rc = 0
t_done
