#!/usr/bin/env bash
# install.sh: `make install DESTDIR=... PREFIX=/usr/local` puts the four
# programs, the man pages and models/fortune-byte (which mt-probe(1) calls
# shipped) in place (issue 20 item 11), and `-m fortune-byte`, a bare name,
# finds the model: here the source tree's models/ beside bin/ (the
# installed copy is found under $(PREFIX)/share/metronome/models, compiled
# in, which a DESTDIR staging cannot exercise).
. "$(dirname "$0")/lib.sh"
t_need make
[ -f "$MT_ROOT/Makefile" ] || t_skip_all "no source tree at $MT_ROOT"
D=$T_TMP/dest
P=/usr/local
# The build tree of this run (build/ or build-asan/): nothing is rebuilt.
B=$(dirname "$MT_TESTBIN")
make -s -C "$MT_ROOT" install DESTDIR="$D" PREFIX=$P BIN="$MT_BIN" B="$B" > make.out 2>&1
rc=$?
t_check "make install exits 0 $( [ $rc = 0 ] || tail -3 make.out)" test $rc = 0

for p in mt-serve mt-replay mt-probe mt-admit; do
    t_check "bin/$p installed, executable" test -x "$D$P/bin/$p"
done
for m in "$MT_ROOT"/man/*.[157]; do
    n=$(basename "$m"); s=${n##*.}
    t_check "man$s/$n installed" test -f "$D$P/share/man/man$s/$n"
done
M=$D$P/share/metronome/models/fortune-byte
for f in config.json model.safetensors tokenizer.json; do
    t_check "share/metronome/models/fortune-byte/$f installed" cmp -s "$M/$f" "$MT_ROOT/models/fortune-byte/$f"
done

# the installed model loads from where it was installed
"$D$P/bin/mt-probe" quality -m "$M" --gen-prompt "A" --gen-tokens 4 > q1.out 2> q1.err
t_check "installed mt-probe loads the installed model $(head -c 120 q1.err)" test $? = 0

# a bare name: found beside bin/ in the source tree, from any directory
cd "$T_TMP" || exit 1
"$MT_BIN/mt-probe" quality -m fortune-byte --gen-prompt "A" --gen-tokens 4 > q2.out 2> q2.err
rc=$?
if [ -d "$MT_BIN/../models/fortune-byte" ]; then
    t_check "-m fortune-byte from elsewhere finds the model $(head -c 120 q2.err)" test $rc = 0
else
    t_skip "programs not in the source tree's bin/ ($MT_BIN)"
fi
"$MT_BIN/mt-probe" quality -m no-such-model --gen-prompt "A" > /dev/null 2> q3.err
t_check "-m no-such-model: says where it looked ($(head -c 160 q3.err))" \
    grep -q "share/metronome/models/no-such-model" q3.err
t_done
