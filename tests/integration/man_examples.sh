#!/usr/bin/env bash
# man_examples.sh: every example of every man page (the .Dl lines and the
# .Bd -literal blocks under .Sh EXAMPLES of man/*.1, *.5, *.7), every
# literal block of metronome(7) and of mt-serve(1)'s WEBSOCKET and METRICS
# sections, and every indented block of README.md is run as typed, in a
# temporary directory per page with bin/ first on PATH (and bin, tests and
# examples linked there, for the examples that name them from the top of
# the source tree), so that the examples cannot rot. A block written as a
# terminal session ("$ " before each command) runs its commands; the
# lines it shows as their output are not run.
#
# What the runner may change, per example (the table EXAMPLES below, keyed
# by page and a piece of the example's text), and nothing else:
#   - nothing about the socket: the examples use mt.sock in the current
#     directory (a fixed /tmp/mt.sock, /run/mt.sock, or the fixed ports
#     8998 and 9464, which collide on a shared host, fail a check);
#   - durations, counts and levels are shortened (listed as subs);
#   - input files (talk.wav, hello.flac, a.wav) are made with sox;
#   - a server the example expects to be running is started first
#     (fixture), and an example that runs until Ctrl-C gets SIGINT, sent to
#     its whole process group as a terminal would, once it is under way.
# An example the table does not know is run as it is, with a timeout: a
# new example is tested from the day it is written. An example that cannot
# run here is listed as skipped, with the reason.
# lane: light, long (it mostly waits, for minutes: make test starts it first among the light tests)
. "$(dirname "$0")/lib.sh"
t_need python3
command -v sox >/dev/null || t_skip_all "sox not installed (it makes the input files)"
t_need mt-serve mt-replay mt-probe mt-admit
MAN_DIR=${MT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}/man
export MAN_DIR T_TMP
python3 - "$@" <<'PY'
import glob, os, re, signal, subprocess, sys, time

MAN = os.environ["MAN_DIR"]
TMP = os.environ["T_TMP"]
BIN = os.environ["MT_BIN"]
n = 0
failed = 0

def tap(ok, name, diag=""):
    global n, failed
    n += 1
    if not ok:
        failed += 1
    print(("ok" if ok else "not ok"), n, "-", name, flush=True)
    if not ok and diag:
        lines = diag.rstrip().splitlines()
        # the reason first, then the tail (a long stderr pushed the
        # reason out of the last 25 lines once: a failure without a why)
        for l in (lines[:1] + lines[1:][-24:] if len(lines) > 25 else lines):
            print("#   " + l, flush=True)

def skip(name, why):
    global n
    n += 1
    print("ok", n, "-", name, "# SKIP", why, flush=True)

def unescape(s):
    s = s.replace("\\(dq", '"').replace("\\&", "").replace("\\-", "-")
    return s.replace("\\e", "\\")

# Sections beyond EXAMPLES whose literal blocks are examples too: all of
# metronome(7), the worked examples of mt-serve(1).
MORE = {"metronome.7": None, "mt-serve.1": ("WEBSOCKET", "METRICS")}

def commands(block):
    """A block shown as a terminal session ("$ " before each command):
    its commands, a command's continuation lines (after a backslash or a
    pipe) with it; the output lines shown between them left out."""
    if not block or not block[0].startswith("$ "):
        return "\n".join(block)
    out, cont = [], False
    for l in block:
        if l.startswith("$ ") or cont:
            out.append(l[2:] if l.startswith("$ ") and not cont else l)
            cont = l.rstrip().endswith("\\") or l.rstrip().endswith("|")
    return "\n".join(out)

def readme_examples(path):
    """README.md's examples: each block of lines indented by four spaces."""
    out, block, prev = [], None, ""
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if block is not None:
            if line.startswith("    "):
                block.append(line[4:])
                continue
            out.append("\n".join(block))
            block = None
        if line.startswith("    ") and prev.strip() == "":
            block = [line[4:]]
        prev = line
    if block is not None:
        out.append("\n".join(block))
    return out

def examples(page):
    """The examples of one page: each .Dl line, each .Bd -literal block."""
    if page.endswith(".md"):
        return readme_examples(page)
    more = MORE.get(os.path.basename(page), ())
    out, on, block = [], False, None
    for line in open(page, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith(".Sh "):
            name = line[4:].strip()
            on = name == "EXAMPLES" or more is None or name in more
            continue
        if not on:
            continue
        if block is not None:
            if line.startswith(".Ed"):
                out.append(commands(block))
                block = None
            else:
                block.append(unescape(line))
        elif line.startswith(".Bd -literal"):
            block = []
        elif line.startswith(".Dl "):
            out.append(unescape(line[4:]))
    return out

# page, a piece of the example's text -> how to run it.
#   skip:      the reason it cannot run here
#   subs:      (old, new) replacements: shorter durations and counts
#   fixture:   "server": an mt-serve on DIR/mt.sock is started first
#   interrupt: seconds to let it run (after DIR/mt.sock exists) before the
#              SIGINT a Ctrl-C would send; None: it ends by itself
#   expect:    a regular expression its standard output must match
#   files:     files it must leave behind
#   timeout:   seconds before it counts as hung
SERVER_FIXTURE = "mt-serve -s %s/mt.sock -m synthetic:tiny"

def fifo_permitted():
    try:
        return subprocess.run(["chrt", "-f", "10", "true"],
                              stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False

def have(*progs):
    import shutil
    return all(shutil.which(p) for p in progs)

def debian_websockets():
    return subprocess.run(["/usr/bin/python3", "-c", "import websockets"],
                          stderr=subprocess.DEVNULL).returncode == 0

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

WS_OK = have("opusenc", "opusdec") and debian_websockets()
EXAMPLES = [
    ("README.md", "make demo", dict(skip="make demo is run by examples_run.sh (demo.sh)")),
    ("README.md", "--control ctl", dict(skip="run as printed by readme_pipeline.sh")),
    ("README.md", "kyutai-tiny-mimi", dict(
        timeout=120, files=["out.wav", "said.txt", "transcript.txt", "ticks.log"],
        expect=r"(?m)^0 \S")),
    ("metronome.7", "stats socket", dict(skip="a HAProxy configuration shown; "
                                            "examples/fleet.sh runs one")),
    ("metronome.7", "--listen 10.0.0.1:7001", dict(skip="needs the hosts 10.0.0.1-3")),
    ("metronome.7", "npm run build", dict(skip="needs Node and Kyutai's client "
                                          "source (kyutai-labs/moshi), not here")),
    ("metronome.7", "http.server", dict(skip="needs Kyutai's web client built")),
    # Kyutai's speech-to-text protocol: before the --ws rules, which its
    # examples would match too
    ("metronome.7", "api/asr-streaming", dict(timeout=120, files=["words.txt"])),
    ("mt-serve.1", "api/asr-streaming", dict(timeout=120, files=["words.txt"])),
    ("mt-replay.1", "api/asr-streaming", dict(timeout=120, files=["words.txt"])),
    ("mt-serve.1", "npm ci", dict(skip="needs the network (git clone) and Node to build "
                                   "Kyutai's client; serve_static.sh tests --static")),
    ("metronome.7", "--ws 127.0.0.1:0", dict(
        timeout=120, subs=[("--frames 50", "--frames 20")], files=["back.wav"])
        if WS_OK else dict(skip="needs opus-tools and Debian's python3-websockets")),
    ("metronome.7", "--storage.tsdb.path", dict(
        interrupt=12, timeout=120, files=["prometheus.yml", "prometheus-data"],
        expect=r"(?m)^metronome_frames_in_total [0-9]",
        subs=[("127.0.0.1:9090", "127.0.0.1:%d" % free_port())])
        if have("prometheus", "curl") else dict(skip="needs prometheus and curl")),
    ("mt-serve.1", "--ws 127.0.0.1:0", dict(
        timeout=120, subs=[("--frames 50", "--frames 20")], files=["back.wav"],
        expect=r"handshake_first=1")
        if WS_OK else dict(skip="needs opus-tools and Debian's python3-websockets")),
    ("mt-serve.1", "--metrics 127.0.0.1:0", dict(
        timeout=120, expect=r"(?m)^metronome_ticks_total [0-9]")
        if have("curl") else dict(skip="needs curl")),
    ("mt-frame.5", "00000000:", dict(skip="a hex dump shown, not a command")),
    ("mt-replay.1", "mt-replay --list-devices", dict(expect=r"PortAudio .*: [0-9]+ devices?")),
    ("mt-replay.1", "--mic", dict(skip="needs a live microphone")),
    ("mt-replay.1", "-n 16 --stagger 5", dict(
        fixture="server", subs=[("-n 16", "-n 2")], files=["out/0.wav", "out/1.wav"])),
    ("mt-replay.1", "--rate-check", dict(
        fixture="server", subs=[("-n 64", "-n 2"), ("--duration 60", "--duration 3")])),
    ("mt-replay.1", "--emit a.wav", dict(files=["b.wav"])),
    ("mt-replay.1", "--retry 5", dict(fixture="server")),
    ("mt-replay.1", "-o - - | sox - out.wav", dict(
        fixture="server", timeout=120, files=["out.wav", "back.wav"])),
    ("metronome.7", "--emit a.wav", dict(files=["b.wav"])),
    ("mt-serve.1", "--emit a.wav", dict(files=["b.wav"])),
    ("metronome.7", "mkfifo ctl", dict(subs=[("-n 16", "-n 2")], timeout=120)),
    ("mt-serve.1", "mt-serve -s mt.sock | mt-probe summarize", dict(
        interrupt=3, expect=r"p99")),
    ("mt-serve.1", "--kv-mem 16M", dict(
        subs=[("--duration 60", "--duration 4")], timeout=120, files=["cliff.png"])),
    ("mt-serve.1", "--device sim:h200-moshi7b", dict(interrupt=2)),
    # as typed it runs synthetic:small on the CPU: where SCHED_FIFO is
    # not permitted (not root, no CAP_SYS_NICE) it cannot run as typed
    ("mt-serve.1", "--rt-priority 50", dict(interrupt=1) if fifo_permitted()
        else dict(skip="SCHED_FIFO is not permitted here")),
    ("mt-serve.1", "mkfifo ctl", dict(interrupt=2)),
    ("mt-serve.1", "--latency-format json", dict(
        interrupt=2, expect=r"(?m)^\[[0-9]+,[0-9.]+\]$")),
    # the shedding example, shortened to the drop (12 s) and a little after
    ("mt-admit.1", "sim:drift-small", dict(
        timeout=150, files=["lat.log"], subs=[("--duration 20", "--duration 15")])),
    ("mt-admit.1", "mkfifo ctl", dict(interrupt=2)),
    ("mt-admit.1", "tee lat.log", dict(interrupt=2, files=["lat.log"])),
    ("mt-admit.1", "--replay lat.log", dict(expect=r"metronome")),
    ("mt-admit.1", "shed 30 device slower", dict(skip="mt-admit's output shown, not a command")),
    ("mt-probe.1", "api/asr-streaming", dict(timeout=120, expect=r"# (no )?wall")),
    ("mt-probe.1", "mt-probe sweep", dict(
        fixture="server", timeout=120,
        subs=[("--to 32 --step 2", "--to 3 --step 2"), ("--hold 20s", "--hold 2s")],
        expect=r"# (no )?wall( up to)?:? [1-9]", files=["sweep.png"])),
    ("mt-probe.1", "mt-probe soak", dict(
        timeout=240,
        subs=[("--runs 20 --duration 30s", "--runs 1 --duration 4s"),
              ("exp:20s", "exp:4s")],
        expect=r"# summary")),
    ("mt-probe.1", "mt-probe predict", dict(expect=r"overflow")),
    ("mt-probe.1", "tee ticks.log", dict(interrupt=3, expect=r"p99",
                                         files=["ticks.log"])),
    ("mt-probe.1", "mt-probe calibrate", dict(
        interrupt=2, timeout=240, files=["cpu-small.profile"],
        subs=[("calibrate -m synthetic:small",
               "calibrate -m synthetic:small --batches 1,4 --lengths 16,128")])),
    ("mt-probe.1", "mt-probe codec", dict(
        expect=r"frames_in=25 frames_out=25", files=["back.wav", "talk.codes"])),
    ("mt-profile.5", "name          = mygpu", dict(write="mygpu.profile")),
    ("mt-profile.5", "sim:./mygpu.profile", dict(interrupt=2)),
]

def rule_for(page, text):
    base = os.path.basename(page)
    for p, piece, rule in EXAMPLES:
        if p == base and piece in text:
            return rule
    return {}

def default_sigint():
    # A background shell may have left SIGINT ignored; a terminal's Ctrl-C
    # reaches programs with the default action, so start them that way.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

def start(cmd, cwd, env, out, err):
    return subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=out,
                            stderr=err, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=default_sigint)

def stop_group(p, sig, wait):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return p.wait(wait)
    except subprocess.TimeoutExpired:
        return None

def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()

def reap_group(pgid, secs):
    """Waits until no process of the group is left (an example's server,
    told to stop by its `kill %1`, drains and writes its last log lines
    after the example's shell ended: into a file the next example may
    have truncated, leaving a hole of NULs), then SIGKILL for the rest."""
    end = time.time() + secs
    while time.time() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass

def wait_for(path, secs):
    end = time.time() + secs
    while time.time() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.1)
    return False

def make_inputs(d):
    for name, extra in (("talk.wav", []), ("a.wav", []), ("hello.flac", [])):
        subprocess.run(["sox", "-n", "-r", "24000", "-c", "1", "-b", "16",
                        os.path.join(d, name), "synth", "2", "sine", "300"] + extra,
                       check=True)

# Things that say an example has rotted whatever its exit status.
ROT = re.compile(r"unknown option|usage:|is not (a|an|one of)|No such file|"
                 r"unexpected argument|not found")

env = dict(os.environ)
env["PATH"] = BIN + ":" + env["PATH"]
ROOT = os.path.dirname(MAN)
FIXED = re.compile(r"/tmp/mt\.sock|/run/mt\.sock|:8998\b|:9464\b")
pages = sorted(glob.glob(os.path.join(MAN, "*.[157]"))) + [os.path.join(ROOT, "README.md")]
# MT_EXAMPLES_PAGES=README.md,metronome.7: those pages only (while writing them)
if os.environ.get("MT_EXAMPLES_PAGES"):
    pages = [p for p in pages
             if os.path.basename(p) in os.environ["MT_EXAMPLES_PAGES"].split(",")]
for page in pages:
    base = os.path.basename(page)
    d = os.path.join(TMP, base)
    os.makedirs(d)
    make_inputs(d)
    for link, to in (("bin", BIN), ("tests", os.path.join(ROOT, "tests")),
                     ("examples", os.path.join(ROOT, "examples"))):
        os.symlink(to, os.path.join(d, link))
    exs = examples(page)
    fixed = [t.splitlines()[0] for t in exs if FIXED.search(t)]
    tap(not fixed, "%s: no example on a fixed socket path or port (%d examples)"
        % (base, len(exs)), "\n".join(fixed))
    for i, text in enumerate(exs, 1):
        first = text.splitlines()[0]
        name = "%s example %d: %s" % (base, i, first[:60])
        rule = rule_for(page, text)
        if "skip" in rule:
            skip(name, rule["skip"])
            continue
        if "write" in rule:
            # a file's text, shown for the examples after it to use
            # written, not run: it is tested by the examples that use it,
            # so one of them must name it
            with open(os.path.join(d, rule["write"]), "w") as f:
                f.write(text + "\n")
            users = [k for k, t in enumerate(exs[i:], i + 1) if rule["write"] in t]
            tap(bool(users), name + " (written to %s, used by example %s)"
                % (rule["write"], ",".join(map(str, users)) or "none"),
                "no later example of %s names %s" % (base, rule["write"]))
            continue
        cmd = text.replace("/tmp/mt.sock", d + "/mt.sock").replace(
            "/run/mt.sock", d + "/mt.sock")
        for old, new in rule.get("subs", []):
            if old not in cmd:
                tap(False, name, "the substitution %r no longer applies" % old)
                break
            cmd = cmd.replace(old, new)
        else:
            # a socket left by a killed example must not pass for this one's
            if os.path.lexists(d + "/mt.sock"):
                os.unlink(d + "/mt.sock")
            fixture = None
            flog = open(os.path.join(d, "fixture-%d.err" % i), "w")
            if rule.get("fixture") == "server":
                fixture = start(SERVER_FIXTURE % d, d, env, subprocess.DEVNULL, flog)
                if not wait_for(d + "/mt.sock", 60):
                    kill_group(fixture)
                    tap(False, name, "the fixture server did not start")
                    continue
            outp, errp = os.path.join(d, "out-%d" % i), os.path.join(d, "err-%d" % i)
            with open(outp, "w") as o, open(errp, "w") as e:
                p = start(cmd, d, env, o, e)
                timeout = rule.get("timeout", 90)
                why = ""
                if rule.get("interrupt") is not None:
                    if wait_for(d + "/mt.sock", 60):
                        time.sleep(rule["interrupt"])
                    rc = p.poll()
                    if rc is None:
                        rc = stop_group(p, signal.SIGINT, 30)
                        if rc is None:
                            why = "still running 30 s after SIGINT"
                        elif rc == -signal.SIGINT or rc == 128 + signal.SIGINT:
                            rc = 0   # ended by the interrupt, as asked
                    else:
                        why = "ended before it was interrupted (status %d)" % rc
                else:
                    try:
                        rc = p.wait(timeout)
                    except subprocess.TimeoutExpired:
                        rc, why = None, "still running after %d s" % timeout
                if p.poll() is None:
                    kill_group(p)
                else:
                    # what the example left in the background (metronome.7)
                    stop_group(p, signal.SIGINT, 0)
                reap_group(p.pid, 30)
            if fixture:
                stop_group(fixture, signal.SIGTERM, 15) or kill_group(fixture)
            flog.close()
            out, err = open(outp).read(), open(errp).read()
            if not why and rc != 0:
                why = "exit status %s" % rc
            if not why and ROT.search(err):
                why = "an error on stderr"
            if not why and rule.get("expect") and not re.search(rule["expect"], out):
                why = "no %r on stdout" % rule["expect"]
            for f in rule.get("files", []):
                if not why and not os.path.exists(os.path.join(d, f)):
                    why = "no file %s" % f
            tap(not why, name, "%s\ncommand:\n%s\nstdout:\n%s\nstderr:\n%s" %
                (why, cmd, out[-1500:], err[-2500:]))
print("1..%d" % n)
sys.exit(1 if failed else 0)
PY
exit $?
