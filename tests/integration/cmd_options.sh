#!/usr/bin/env bash
# cmd_options.sh: the option conventions every program shares (src/cmd/opt.c):
# --version prints "PROG VERSION" and exits 0; --help prints the full text
# on stdout and exits 0; an unknown option prints one error line and one
# usage line on stderr, nothing on stdout, and exits 2; a bad value names
# the option and the value (the option, not the value, even when the value
# is a separate argument), and exits 2.
. "$(dirname "$0")/lib.sh"
VER=$(sed -n 's/^#define MT_VERSION "\(.*\)"$/\1/p' "$MT_ROOT/src/util/version.h")
[ -n "$VER" ] || t_skip_all "no MT_VERSION in src/util/version.h"

for p in mt-serve mt-replay mt-admit mt-probe; do
    B=$MT_BIN/$p
    if [ ! -x "$B" ]; then t_skip "$p not built"; continue; fi

    "$B" --version >"$T_TMP/out" 2>"$T_TMP/err" </dev/null
    t_check "$p --version: exit 0" [ $? = 0 ]
    t_check "$p --version prints '$p $VER'" [ "$(cat "$T_TMP/out")" = "$p $VER" ]

    "$B" --help >"$T_TMP/out" 2>"$T_TMP/err" </dev/null
    rc=$?
    t_check "$p --help: exit 0, the text on stdout" \
        [ $rc = 0 -a "$(wc -l <"$T_TMP/out")" -gt 5 -a ! -s "$T_TMP/err" ]
    t_check "$p --help lists --version" grep -q -- '--version' "$T_TMP/out"

    "$B" --no-such-option >"$T_TMP/out" 2>"$T_TMP/err" </dev/null
    rc=$?
    t_check "$p --no-such-option: exit 2" [ $rc = 2 ]
    t_check "$p --no-such-option: nothing on stdout" [ ! -s "$T_TMP/out" ]
    t_check "$p --no-such-option: two lines on stderr" [ "$(wc -l <"$T_TMP/err")" = 2 ]
    t_check "$p --no-such-option: the error names the option" \
        grep -q "^$p: unknown option '--no-such-option'" "$T_TMP/err"
    t_check "$p --no-such-option: one usage line pointing to --help" \
        grep -q "^usage: $p .*; try '$p --help'\$" "$T_TMP/err"
done

# mt-probe's commands follow the same rules
P=$MT_BIN/mt-probe
if [ -x "$P" ]; then
    "$P" sweep --version >"$T_TMP/out" 2>&1
    t_check "mt-probe sweep --version prints 'mt-probe $VER'" \
        [ $? = 0 -a "$(cat "$T_TMP/out")" = "mt-probe $VER" ]
    "$P" predict --bogus >"$T_TMP/out" 2>"$T_TMP/err"
    t_check "mt-probe predict --bogus: exit 2, two lines" \
        [ $? = 2 -a "$(wc -l <"$T_TMP/err")" = 2 ]
    t_check "mt-probe predict --bogus: usage of the command" \
        grep -q "try 'mt-probe predict --help'" "$T_TMP/err"
    "$P" frobnicate >"$T_TMP/out" 2>"$T_TMP/err"
    t_check "mt-probe frobnicate: exit 2, two lines" \
        [ $? = 2 -a "$(wc -l <"$T_TMP/err")" = 2 ]
    "$P" predict --kv-mem 12Q >/dev/null 2>"$T_TMP/err"
    t_check "mt-probe predict --kv-mem 12Q: exit 2" [ $? = 2 ]
    t_check "  names --kv-mem and '12Q'" grep -q -- "--kv-mem: '12Q'" "$T_TMP/err"
else
    t_skip "mt-probe not built"
fi

# A bad value names the option and the value, in one line.
bad_value() {   # bad_value PROG OPTION VALUE [more args]
    local p=$1 opt=$2 val=$3
    shift 3
    "$MT_BIN/$p" "$opt" "$val" "$@" >"$T_TMP/out" 2>"$T_TMP/err" </dev/null
    local rc=$?
    t_check "$p $opt $val: exit 2" [ $rc = 2 ]
    t_check "$p $opt $val: one line on stderr" [ "$(wc -l <"$T_TMP/err")" = 1 ]
    t_check "$p $opt $val: it names $opt and '$val'" grep -q -- "^$p: $opt: '$val' " "$T_TMP/err"
}
if [ -x "$MT_BIN/mt-replay" ]; then
    bad_value mt-replay --stagger abc -s /nonexistent x.wav
    bad_value mt-replay --duration 0 -s /nonexistent x.wav
    bad_value mt-replay -n 0 -s /nonexistent x.wav
fi
if [ -x "$MT_BIN/mt-serve" ]; then
    bad_value mt-serve --kv-mem lots --stdio
    bad_value mt-serve --threads 2000 --stdio
    bad_value mt-serve --device tpu --stdio
fi
if [ -x "$MT_BIN/mt-admit" ]; then
    bad_value mt-admit --margin 1.5
    bad_value mt-admit --budget soon
fi
# a missing value: the option named, and the usage line
if [ -x "$MT_BIN/mt-replay" ]; then
    "$MT_BIN/mt-replay" --stagger >/dev/null 2>"$T_TMP/err"
    t_check "mt-replay --stagger (no value): exit 2" [ $? = 2 ]
    t_check "  names --stagger" grep -q "option '--stagger' needs a value" "$T_TMP/err"
fi
t_done
