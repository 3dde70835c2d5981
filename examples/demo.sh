#!/usr/bin/env bash
# Placeholder until mt-serve, mt-replay and mt-probe land (issue 8 makes this
# the real main job). It does not pretend.
for p in mt-serve mt-replay mt-probe mt-admit; do
    [ -x "${MT_BIN:-bin}/$p" ] || { echo "demo: not yet built: needs $p"; exit 1; }
done
