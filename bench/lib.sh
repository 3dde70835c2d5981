# bench/lib.sh: sourced by the bench_*.sh scripts (not run by bench/run.sh).
# bench_need WHO PATH...: every PATH (a program of this tree: bin/...,
# build/tests/...) is built when it is missing (`make PATH` from the
# tree's root, for a path inside it); one that still is not there ends the
# benchmark with exit 1 and the reason, because a benchmark that did
# nothing must not pass for one that ran.
BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench_need() {
    local who=$1 p abs rel
    shift
    for p; do
        [ -x "$p" ] && continue
        abs=$(cd "$(dirname "$p")" 2>/dev/null && pwd)/$(basename "$p")
        case $abs in
            "$BENCH_ROOT"/*)
                rel=${abs#"$BENCH_ROOT"/}
                echo "$who: $p is not built: make $rel" >&2
                make -C "$BENCH_ROOT" "$rel" >&2 ||
                    { echo "$who: make $rel failed: cannot run" >&2; exit 1; } ;;
        esac
        [ -x "$p" ] || { echo "$who: $p is not built (make bench builds it): cannot run" >&2; exit 1; }
    done
}
