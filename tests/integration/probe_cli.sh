#!/usr/bin/env bash
# probe_cli.sh: mt-probe without a server: usage and exit codes, predict's
# model checked against an independent computation of the same workload,
# summarize's percentiles and counts on known lines, and the tick plot.
. "$(dirname "$0")/lib.sh"
P=$MT_BIN/mt-probe
t_need mt-probe
PY=/usr/bin/python3

# ---- usage -------------------------------------------------------------------
for c in sweep soak predict summarize plot; do
    "$P" $c --help >"$T_TMP/h" 2>&1
    t_ok $? "$c --help exits 0"
    grep -q "usage: mt-probe $c" "$T_TMP/h"
    t_ok $? "$c --help names the command"
done
"$P" >/dev/null 2>&1; t_check "no command: exit 2" test $? -eq 2
"$P" frobnicate >/dev/null 2>&1; t_check "unknown command: exit 2" test $? -eq 2
"$P" predict --arrivals nonsense:1 --kv-mem 1M >/dev/null 2>"$T_TMP/e"
t_check "bad arrivals: exit 2" test $? -eq 2
grep -q "arrivals" "$T_TMP/e"; t_ok $? "bad arrivals: the message names it"
"$P" predict --position-bytes 1K >/dev/null 2>&1
t_check "predict without --kv-mem: exit 2" test $? -eq 2
"$P" soak --runs 1 >/dev/null 2>&1
t_check "soak without mt-serve args: exit 2" test $? -eq 2
"$P" soak --runs 1 -- -s /tmp/x.sock >/dev/null 2>&1
t_check "soak refuses a socket in the mt-serve args: exit 2" test $? -eq 2

# ---- predict: deterministic workload, independent check ------------------------
# even:1 arrivals (t = 0, 1, 2, ...), every session 100 s, 1 KiB per position,
# a 1 MiB pool = 64 blocks of 16: the pool overflows at the first frame tick
# where sum ceil(age/16) > 64.
"$P" predict --position-bytes 1K --kv-mem 1M --arrivals even:1 \
    --lengths fixed:100s --duration 60s --samples 3 --runs 1 >"$T_TMP/p" 2>&1
t_ok $? "predict runs"
got=$(awk -F'\t' '$1=="1"{print $5}' "$T_TMP/p")
want=$($PY - <<'EOF'
import math
period=0.08
for k in range(0, 10000):
    t=k*period
    blocks=0
    for i in range(0, 61):
        if i > t + 1e-12: break
        age=math.floor((t-i)/period+1e-9)+1
        if age > 1250: continue
        blocks+=math.ceil(age/16)
    if blocks > 64:
        print("%.1f" % t); break
EOF
)
t_diag "overflow: predict $got s, independent $want s"
t_check "predict: overflow time matches an independent computation" test "$got" = "$want"
grep -q "bounded capacity	3 sessions" "$T_TMP/p"
t_ok $? "predict: bounded capacity = 64 blocks / 17 blocks per session = 3"
grep -q "overflow within run	3 of 3 seeds" "$T_TMP/p"
t_ok $? "predict: every seed of a deterministic load overflows"
# A pool too big to fill: never.
"$P" predict --position-bytes 1K --kv-mem 1G --arrivals even:1 \
    --lengths fixed:10s --duration 30s --samples 5 >"$T_TMP/p2" 2>&1
grep -q "overflow within run	0 of 5 seeds" "$T_TMP/p2"
t_ok $? "predict: a pool far over the demand never overflows"
# Poisson: Monte Carlo median and the mean-field closed form agree roughly.
"$P" predict --position-bytes 8K --kv-mem 8M --arrivals poisson:1 \
    --lengths exp:20s --duration 30s --samples 300 >"$T_TMP/p3" 2>&1
mc=$(sed -n 's/^unbounded time to overflow\tmedian \([0-9.]*\) s.*/\1/p' "$T_TMP/p3")
mf=$(sed -n 's/^unbounded mean-field fill time\t\([0-9.]*\) s/\1/p' "$T_TMP/p3")
t_diag "poisson: Monte Carlo median $mc s, mean-field $mf s"
$PY -c "import sys; a,b=float('$mc'),float('$mf'); sys.exit(0 if abs(a-b)<=0.25*b else 1)" 2>/dev/null
t_ok $? "predict: Monte Carlo median within 25% of the mean-field fill time"
# Seeds are deterministic.
a=$("$P" predict --position-bytes 8K --kv-mem 8M --seed 7 --samples 50 | md5sum)
b=$("$P" predict --position-bytes 8K --kv-mem 8M --seed 7 --samples 50 | md5sum)
t_check "predict: same seed, same answer" test "$a" = "$b"

# ---- summarize ---------------------------------------------------------------
$PY - >"$T_TMP/ticks" <<'EOF'
for i in range(200):
    fill = 1 if i >= 150 else 0
    print(f"tick={i} t={i*0.08:.3f} active=2 stepped=2 step_ms={i+1}.000 "
          f"late_ms=0.000 p50_ms=5.000 p99_ms=9.000 in=2 out={2-fill} fill={fill} "
          f"kv_used=100 kv_free=900 pending=0 admitted=2 rejected=0 preempted=0 "
          f"naive_ms=3.000 naive_met=100.0 met={50.0 if fill else 100.0}")
print("this is not = a latency line")
EOF
"$P" summarize <"$T_TMP/ticks" >"$T_TMP/s" 2>&1
t_ok $? "summarize reads tick lines"
# step_ms = 1..200: nearest-rank p50 = 100, p99 = 198, max 200, sum 20100.
line=$(grep -E '^tick +step_ms ' "$T_TMP/s")
set -- $line
t_check "summarize: step_ms count 200" test "$3" = 200
t_check "summarize: step_ms p50 100 (nearest rank)" test "$5" = 100
t_check "summarize: step_ms p99 198" test "$7" = 198
t_check "summarize: step_ms max 200" test "$8" = 200
grep -q "FILL (silence) 50 " "$T_TMP/s"
t_ok $? "summarize: counts the FILL frames"
t_check "summarize: the frame counts are summed (fill: 50)" \
    sh -c "grep -E '^tick +fill ' '$T_TMP/s' | awk '{ exit \$NF != 50 }'"
for k in kv_free kv_used active step_ms admitted; do
    t_check "summarize: $k, a level or a time, is not summed" \
        sh -c "grep -E '^tick +$k ' '$T_TMP/s' | awk '{ exit \$NF != \"-\" }'"
done
printf 'tick=0 t=0 kv_free=536870912 x=1\ntick=1 t=1 kv_free=536592384 x=2\n' |
    "$P" summarize >"$T_TMP/big" 2>&1
t_check "summarize: byte counts whole, not in e-notation" \
    sh -c "grep -E '^tick +kv_free ' '$T_TMP/big' | grep -q ' 536731648 ' && ! grep -q 'e+' '$T_TMP/big'"
grep -q "truthful 87.5%  |  naive 100.0%" "$T_TMP/s"
t_ok $? "summarize: truthful met beside the naive figure"
grep -q "1 malformed line skipped" "$T_TMP/s"
t_ok $? "summarize: counts a malformed line"
"$P" summarize --strict <"$T_TMP/ticks" >/dev/null 2>"$T_TMP/e"
t_check "summarize --strict: exit 1 on a malformed line" test $? -eq 1
grep -q "line 201" "$T_TMP/e"; t_ok $? "summarize --strict: names the line"
printf 'client session=1 rtt_ms=10\nclient session=2 rtt_ms=30\n' |
    "$P" summarize --tsv --kind client >"$T_TMP/c"
grep -q "^client	rtt_ms	2	20" "$T_TMP/c"
t_ok $? "summarize --tsv: other record kinds (client lines)"
: | "$P" summarize >/dev/null 2>&1
t_check "summarize: empty input is an error (exit 1)" test $? -eq 1
{ printf 'A\001'; head -c 3000 /dev/urandom | tr -d '\n'; } | "$P" summarize >/dev/null 2>&1
rc=$?
t_check "summarize: binary garbage is refused cleanly" test $rc -eq 1

# ---- plot --------------------------------------------------------------------
if command -v gnuplot >/dev/null; then
    "$P" plot --ticks "$T_TMP/ticks" -o "$T_TMP/t.png" >/dev/null 2>"$T_TMP/e"
    t_ok $? "plot: draws tick lines"
    head -c 8 "$T_TMP/t.png" | od -An -c | grep -q "P   N   G"
    t_ok $? "plot: the output is a PNG"
else
    t_skip "gnuplot not installed"
    t_skip "gnuplot not installed"
fi
t_done
