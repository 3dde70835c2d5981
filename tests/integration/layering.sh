#!/usr/bin/env bash
# layering.sh: the folder layering of src/ holds (tools/layering.sh): no
# file includes a folder above its own stage, no two folders of one stage
# include each other, and no two objects of one folder call each other (read from the objects' symbols with nm). Each
# rule is first shown to fail on a small planted tree, so a check that can
# no longer fail is caught too.
. "$(dirname "$0")/lib.sh"
CHECK=$MT_ROOT/tools/layering.sh
OBJ=$(dirname "$MT_TESTBIN")/src
[ -d "$OBJ" ] || t_skip_all "no objects under $OBJ (make all first)"
CC=${CC:-cc}
command -v nm >/dev/null || t_skip_all "no nm"

# ---- planted: a wrong-way include -----------------------------------------
P=$T_TMP/plant
mkdir -p "$P/src/decode" "$P/src/serve" "$P/obj"
printf '#include "decode/kv.h"\n' > "$P/src/serve/ok.c"
printf '#include <stdio.h>\n#include "serve/engine.h"\n' > "$P/src/decode/bad.c"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a planted decode -> serve include fails the check" [ $? = 1 ]
t_check "and is named with its line" grep -q "include: $P/src/decode/bad.c:2 includes serve/" "$T_TMP/out"
t_check "the serve -> decode include beside it is not" \
    sh -c "! grep -q 'ok.c' '$T_TMP/out'"
printf '#include "nostage/x.h"\n' > "$P/src/decode/bad.c"
mkdir -p "$P/src/nostage"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a folder with no stage fails the check" grep -q "src/nostage/ has no stage" "$T_TMP/out"
rm -rf "$P/src/nostage" "$P/src/decode/bad.c"

# ---- planted: two folders of one stage including each other ---------------
mkdir -p "$P/src/codec" "$P/src/gpu" "$P/src/model" "$P/src/wire"
printf '#include "codec/mimi.h"\n' > "$P/src/decode/d.c"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a one-way include between folders of one stage passes" [ $? = 0 ]
printf '#include <stdio.h>\n#include "decode/kv.h"\n' > "$P/src/codec/c.c"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a planted decode <-> codec cycle fails the check" [ $? = 1 ]
t_check "and is named with both lines" \
    grep -q "cycle: codec/ and decode/ (one stage) include each other ($P/src/codec/c.c:2, $P/src/decode/d.c:1)" "$T_TMP/out"
# model -> wire -> gpu -> model
rm -f "$P/src/codec/c.c" "$P/src/decode/d.c"
printf '#include "wire/a.h"\n' > "$P/src/model/m.c"
printf '#include "gpu/a.h"\n' > "$P/src/wire/w.c"
printf '#include "model/a.h"\n' > "$P/src/gpu/g.c"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a planted three-folder include cycle fails the check" grep -q "include each other (round a cycle)" "$T_TMP/out"
rm -rf "$P/src/codec" "$P/src/gpu" "$P/src/model" "$P/src/wire"

# ---- planted: two objects of one folder calling each other ----------------
mkdir -p "$P/obj/model"
printf 'int b_f(void);\nint a_f(void) { return b_f() + 1; }\n' > "$T_TMP/a.c"
printf 'int a_f(void);\nint b_f(void) { return 2; }\nint b_g(void) { return a_f(); }\n' > "$T_TMP/b.c"
$CC -c "$T_TMP/a.c" -o "$P/obj/model/a.o" && $CC -c "$T_TMP/b.c" -o "$P/obj/model/b.o"
t_check "planted objects built" [ $? = 0 ]
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a planted pair of mutual calls fails the check" [ $? = 1 ]
t_check "and is named with the symbols" grep -q "calls: model/a.o and model/b.o call each other (b_f / a_f)" "$T_TMP/out"
# a -> b -> c -> a
printf 'int c_f(void);\nint b_f(void) { return c_f(); }\n' > "$T_TMP/b.c"
printf 'int a_f(void);\nint c_f(void) { return a_f(); }\n' > "$T_TMP/c.c"
$CC -c "$T_TMP/b.c" -o "$P/obj/model/b.o" && $CC -c "$T_TMP/c.c" -o "$P/obj/model/c.o"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "a planted three-file cycle fails the check" grep -q "call each other (round a cycle)" "$T_TMP/out"
rm -f "$P/obj/model/c.o"
printf 'int b_f(void) { return 2; }\n' > "$T_TMP/b.c"
$CC -c "$T_TMP/b.c" -o "$P/obj/model/b.o"
"$CHECK" "$P/src" "$P/obj" > "$T_TMP/out" 2>&1
t_check "one-way calls pass" [ $? = 0 ]

# ---- the tree itself ------------------------------------------------------
"$CHECK" "$MT_ROOT/src" "$OBJ" > "$T_TMP/out" 2>&1
rc=$?
[ $rc = 0 ] || sed 's/^/# /' "$T_TMP/out"
t_check "src/: no include of a folder above, no include cycle within a stage, no mutual calls in a folder" [ $rc = 0 ]
t_done
