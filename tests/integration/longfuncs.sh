#!/usr/bin/env bash
# longfuncs.sh: no function of src/ or kernels/ runs over 100 code lines
# (tools/longfuncs.sh) but those its allow-list names with a reason. The
# check is first shown to fail on a planted long function, and to count
# code lines only (a long comment does not make a function long).
# lane: light
. "$(dirname "$0")/lib.sh"
t_need python3
CHECK=$MT_ROOT/tools/longfuncs.sh
P=$T_TMP/plant
mkdir -p "$P"

# a function of n code lines, each a statement; optional comment lines
plant() {   # FILE NAME NCODE NCOMMENT
    {
        printf 'static int %s(int x)\n{\n' "$2"
        for _ in $(seq "$4"); do printf '    /* a comment line */\n'; done
        for _ in $(seq "$(($3 - 1))"); do printf '    x += 1;\n'; done
        printf '    return x;\n}\n'
    } >> "$1"
}
plant "$P/long.c" too_long 101 0
plant "$P/long.c" just_fits 100 0
"$CHECK" "$P" > "$T_TMP/out" 2>&1
t_check "a planted function of 101 code lines fails the check" [ $? = 1 ]
t_check "and is named with its file, line and count" grep -q "long.c:2 too_long 101" "$T_TMP/out"
t_check "one of 100 code lines is not named" sh -c "! grep -q just_fits '$T_TMP/out'"

rm -f "$P/long.c"
plant "$P/commented.c" well_said 90 40
printf '\nstatic const int table[] = {\n%s};\n' "$(seq -s ', ' 1 400 | fold -w 70)" >> "$P/commented.c"
"$CHECK" "$P" > "$T_TMP/out" 2>&1
t_check "90 code lines with 40 comment lines between pass" [ $? = 0 ]

"$CHECK" -n 50 "$P" > "$T_TMP/out" 2>&1
t_check "-n 50 names the same function" grep -q "well_said 90" "$T_TMP/out"

# ---- the tree itself ------------------------------------------------------
"$CHECK" "$MT_ROOT/src" "$MT_ROOT/kernels" > "$T_TMP/out" 2>&1
rc=$?
[ $rc = 0 ] || sed 's/^/# /' "$T_TMP/out"
t_check "src/ and kernels/: no function over 100 code lines outside the allow-list" [ $rc = 0 ]
"$CHECK" -a "$MT_ROOT/src" "$MT_ROOT/kernels" | sed 's/^/# /'
t_done
