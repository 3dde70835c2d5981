#!/usr/bin/env bash
# layering.sh: checks the folder layering of src/ (docs/ARCHITECTURE.md).
#
#   tools/layering.sh [SRC_DIR [OBJ_DIR]]     (defaults: src, build/src)
#
# Two rules, each line of output one breach, exit 1 if there is any:
#
#   include   A file of src/F/ (.c or .h) includes "G/..." of a folder G at
#             a higher stage than F. Stages, lowest first:
#               0 util
#               1 model, wire, gpu
#               2 decode, codec
#               3 serve, client, probe, admit
#               4 cmd
#             A folder may include its own stage and any below; a folder
#             this table does not know is a breach too (give it a stage).
#   calls     Two object files of one folder that call each other, directly
#             or round a longer cycle (a -> b -> c -> a): read from the
#             objects' symbol tables (nm: the globals each defines and the
#             ones it leaves undefined), so it sees calls, not includes.
#             Needs the objects, i.e. a build (make all); OBJ_DIR/F/*.o.
#             The CUDA backend's objects ($B/cuda/src/decode) are read
#             with decode's when they are there.
set -u -o pipefail
SRC=${1:-src}
OBJ=${2:-build/src}
bad=0

declare -A STAGE=([util]=0 [model]=1 [wire]=1 [gpu]=1 [decode]=2 [codec]=2
                  [serve]=3 [client]=3 [probe]=3 [admit]=3 [cmd]=4)

# ---- includes ----------------------------------------------------------
for dir in "$SRC"/*/; do
    f=$(basename "$dir")
    sf=${STAGE[$f]:-}
    if [ -z "$sf" ]; then
        echo "include: $SRC/$f/ has no stage (add it to tools/layering.sh)"
        bad=1
        continue
    fi
    for file in "$dir"*.c "$dir"*.h; do
        [ -e "$file" ] || continue
        # "G/name.h" includes only: <system> ones and "../" paths are not folders of src/
        while IFS=: read -r line g; do
            [ -d "$SRC/$g" ] || continue
            sg=${STAGE[$g]:-}
            if [ -z "$sg" ] || [ "$sg" -gt "$sf" ]; then
                echo "include: $file:$line includes $g/ (stage ${sg:-?}) from $f/ (stage $sf)"
                bad=1
            fi
        done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$file" |
                 sed 's/^\([0-9]*\):[^"]*"\([a-z_]*\)\/.*/\1:\2/')
    done
done

# ---- mutual calls inside a folder ---------------------------------------
if [ ! -d "$OBJ" ]; then
    echo "calls: no objects under $OBJ (build first: make all)"
    exit 2
fi
CUDA_OBJ="$(dirname "$OBJ")/cuda/src"
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT
for dir in "$OBJ"/*/; do
    f=$(basename "$dir")
    objs=$(ls "$dir"*.o 2>/dev/null)
    [ -d "$CUDA_OBJ/$f" ] && objs="$objs $(ls "$CUDA_OBJ/$f"/*.o 2>/dev/null)"
    [ -n "$objs" ] || continue
    # "D file sym" for a global defined, "U file sym" for one used
    nm -A $objs | awk '
        { split($1, p, ":"); n = split(p[1], q, "/"); b = q[n]; sub(/\.o$/, "", b) }
        NF == 3 && $2 ~ /^[TDBRGSVW]$/ { print "D", b, $3 }
        NF == 3 && $2 == "U"           { print "U", b, $3 }' |
    awk -v folder="$f" '
        BEGIN { n = 0 }
        $1 == "D" { def[$3] = $2; next }
        { use[n] = $2; sym[n] = $3; n++ }
        END {
            for (i = 0; i < n; i++) {
                d = def[sym[i]]
                if (d != "" && d != use[i] && !((use[i], d) in e)) {
                    e[use[i], d] = sym[i]
                    node[use[i]] = 1; node[d] = 1
                }
            }
            # reachability (the folders hold tens of files)
            for (a in node) for (b in node) if ((a, b) in e) r[a, b] = 1
            for (k in node) for (a in node) if ((a, k) in r)
                for (b in node) if ((k, b) in r) r[a, b] = 1
            for (a in node) for (b in node) {
                if (!(a < b && (a, b) in r && (b, a) in r))
                    continue
                how = " (round a cycle)"
                if ((a, b) in e && (b, a) in e)
                    how = " (" e[a, b] " / " e[b, a] ")"
                printf "calls: %s/%s.o and %s/%s.o call each other%s\n", folder, a, folder, b, how
            }
        }' || echo "calls: reading $dir failed"
done > "$tmp"
if [ -s "$tmp" ]; then
    cat "$tmp"
    bad=1
fi

exit $bad
