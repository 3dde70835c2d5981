#!/usr/bin/env bash
# metrics_examples.sh: the Prometheus examples (issue 41): promtool accepts
# examples/prometheus.yml and examples/metronome-alerts.yml, and the alert's
# own unit test (examples/metronome-alerts.test.yml) passes: it fires for a
# server whose steps look on time while its lateness and FILL frames say
# otherwise, and stays silent for a healthy and an honestly slow one.
. "$(dirname "$0")/lib.sh"
t_need promtool
cd "$T_TMP" || exit 1
cp "$MT_ROOT/examples/prometheus.yml" "$MT_ROOT/examples/metronome-alerts.yml" \
   "$MT_ROOT/examples/metronome-alerts.test.yml" .
promtool check config prometheus.yml > config.txt 2>&1
t_ok $? "promtool check config examples/prometheus.yml $(grep -m1 -i error config.txt)"
promtool check rules metronome-alerts.yml > rules.txt 2>&1
t_ok $? "promtool check rules examples/metronome-alerts.yml $(grep -m1 -i error rules.txt)"
promtool test rules metronome-alerts.test.yml > test.txt 2>&1
rc=$?
sed 's/^/# /' test.txt | head -20
t_ok $rc "promtool test rules: the alert fires on the cliff only"
t_done
