#!/usr/bin/env bash
# vectorabi.sh: no function of src/ takes or returns a vector across the
# clones' ABIs (tools/vectorabi.sh): always inlined or with a target of
# its own. The check is first shown to find planted helpers (one taking
# vectors, one returning one) and to pass the allowed forms.
# lane: light
. "$(dirname "$0")/lib.sh"
t_need python3
CHECK=$MT_ROOT/tools/vectorabi.sh
P=$T_TMP/plant
mkdir -p "$P"
cat > "$P/bad.c" <<'EOF'
typedef double v4d __attribute__((vector_size(32)));
#define GOOD __attribute__((target("avx2")))
/* a comment naming v4d does not count */
static double tree8(v4d lo, v4d hi)
{
    return lo[0] + hi[0];
}
static inline __attribute__((always_inline)) double inlined(v4d lo)
{
    return lo[0];
}
GOOD static double targeted(v4d lo,
                            int n)
{
    return lo[0] + n;
}
static v4d
returns_one(double a)
{
    v4d r = { a, a, a, a };
    return r;
}
static int plain(int x) { return x; }
EOF
"$CHECK" "$P" > "$T_TMP/out" 2>&1
t_check "planted helpers fail the check" [ $? = 1 ]
t_check "the one taking vectors is named with its file and line" grep -q "bad.c:4 tree8" "$T_TMP/out"
t_check "the one returning a vector is named" grep -q "bad.c:18 returns_one" "$T_TMP/out"
t_check "always_inline, a target and a plain function are not" \
    sh -c "! grep -qE 'inlined|targeted|plain' '$T_TMP/out'"

# ---- the tree itself ------------------------------------------------------
"$CHECK" "$MT_ROOT/src" > "$T_TMP/out" 2>&1
rc=$?
[ $rc = 0 ] || sed 's/^/# /' "$T_TMP/out"
t_check "src/: no helper takes or returns a vector across the clones' ABIs" [ $rc = 0 ]
t_done
