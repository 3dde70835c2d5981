# tools/columns.sh: sourced by the scripts that read a table (bench/,
# examples/, tests/integration/): COLS_AWK, awk functions that select a
# column by its header's name, never by its position, so that a column
# added to a table moves nothing, and a renamed one fails loudly.
#
#   awk -F'\t' "$COLS_AWK"'
#       cols_try("concurrency") { next }    # the header: its names kept
#       /^#/ { next }
#       { print col("concurrency"), col("p99_true_ms") }
#       END { if (COLS_BAD) exit 2 }' table.tsv
#
# cols_try(KEY) is true on a header line, one that names a column KEY
# anywhere (the line may start with "#" or "# ", as mt-probe soak's
# whitespace-separated header does), and then names the columns; a later
# header (the next file's) names them anew. col(NAME) is the field of the
# current line under NAME; a name no header gave prints
# "FILE: no column 'NAME' in its header" on stderr and exits 2: END blocks
# must begin with `if (COLS_BAD) exit 2`.
COLS_AWK='
function cols_try(key,   i, o, nm, hit) {
    o = ($1 == "#") ? 1 : 0
    for (i = 1 + o; i <= NF && !hit; i++) {
        nm = $i
        if (i == 1) sub(/^#/, "", nm)
        hit = (nm == key)
    }
    if (!hit) return 0
    for (nm in COL) delete COL[nm]
    for (i = 1 + o; i <= NF; i++) {
        nm = $i
        if (i == 1) sub(/^#/, "", nm)
        COL[nm] = i - o
    }
    return 1
}
function col(name) {
    if (!(name in COL)) {
        printf "%s: no column '\''%s'\'' in its header\n", FILENAME, name > "/dev/stderr"
        COLS_BAD = 1
        exit 2
    }
    return $(COL[name])
}
'
