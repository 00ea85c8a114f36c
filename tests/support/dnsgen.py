"""A DNS load generator that says when it was the bottleneck.

Each query goes from a fresh UDP socket (a new source port: a new nginx
session, as in seed 000), on an absolute schedule: query i is due at
start + i/rate, and the clock is read before every send. It runs in a
process of its own, pinned to the CPUs it is given, and returns what it
planned, sent and got back, how long sending took and its own CPU time.

A run is valid only when the generator kept up: sent at least
MIN_SENT_SHARE of the planned queries, none of them refused by the kernel
(a send error is a query that never left), finished sending within
MAX_OVERRUN of the planned time, and sent 99 % of its queries within
MAX_P99_LATENESS_S of their due time (a stall followed by a burst is not the
planned load). An invalid run is a fact about the
generator and this machine, never a figure about the system under test.

Targets are only loopback or the lab's own containers; every run is
bounded by its planned time x MAX_OVERRUN plus the reply timeout.

run_compiled does the same with the compiled generator (dnsgen_go/, for
rates Python cannot reach, and each answer's latency), under a stricter rule
(compiled_validity).
"""
import json
import multiprocessing
import os
import resource
import subprocess

import gotool
import probes

MIN_SENT_SHARE = 0.98
MAX_OVERRUN = probes.SEND_OVERRUN
MAX_P99_LATENESS_S = 0.1


def validity(planned, sent, send_s, seconds, send_errors=0, lateness_p99_s=0.0):
    """(valid, why) for a run that planned `planned` queries over `seconds`."""
    why = []
    if sent - send_errors < MIN_SENT_SHARE * planned:
        why.append("sent %d of %d planned (under %d %%)" % (sent - send_errors, planned, 100 * MIN_SENT_SHARE))
    if send_errors:
        why.append("%d sends refused by the kernel" % send_errors)
    if lateness_p99_s is None or lateness_p99_s > MAX_P99_LATENESS_S:
        why.append("99th percentile lateness %s s (over %s s)" % (lateness_p99_s, MAX_P99_LATENESS_S))
    if send_s > MAX_OVERRUN * seconds:
        why.append("sending took %.1f s for %.1f s planned (over %d %%)" % (send_s, seconds, 100 * (MAX_OVERRUN - 1)))
    return not why, "; ".join(why)


def _run(host, ports, rate, seconds, timeout):
    planned = int(round(rate * seconds))
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    r = probes.dns_load(host, ports, rate, planned, timeout=timeout)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    valid, why = validity(planned, r["sent"], r["send_s"], seconds, r["send_errors"], r["lateness_p99_s"])
    return {"rate": rate, "seconds": seconds, "planned": planned, "sent": r["sent"], "answered": r["answered"],
            "unanswered": r["sent"] - r["answered"] - r["send_errors"], "send_errors": r["send_errors"],
            "send_s": r["send_s"], "wall_s": r["seconds"], "lateness_p50_s": r["lateness_p50_s"],
            "lateness_p99_s": r["lateness_p99_s"], "lateness_max_s": r["lateness_max_s"],
            "generator_cpu_s": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 3),
            "valid": valid, "invalid_because": why}


def _child(args):
    cpus, host, ports, rate, seconds, timeout = args
    if cpus:
        os.sched_setaffinity(0, cpus)
    return _run(host, ports, rate, seconds, timeout)


def run(host, ports, rate, seconds, timeout=2.0, cpus=None):
    """One paced run in a child process pinned to `cpus` (a set, or None)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        return pool.apply(_child, ((cpus, host, ports, rate, seconds, timeout),))


# The compiled generator (tests/support/dnsgen_go, built by `lab/lab.sh
# gobins` into $HOMELAB_EDGE_CACHE/bin/dnsgen): the same plan and the same
# fresh source port per query, at rates Python cannot reach, with each
# answer's latency. It is judged harder than the Python generator, because it
# claims more: a compiled sender that is 1 ms late at p99, near a core's worth
# of CPU, or dropped by its own kernel is not pacing, and what it measured is
# (partly) itself.
COMPILED_MAX_P99_LATENESS_S = 0.001
COMPILED_MAX_CPU_SHARE = 0.70  # of one core, over the run's wall time
GO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dnsgen_go")


def compiled_validity(out):
    """(valid, why) for the compiled generator's JSON output `out`."""
    why = []
    if out["send_errors"]:
        why.append("%d send errors (%s)" % (out["send_errors"], ", ".join(
            "%s %d" % kv for kv in sorted((out.get("send_errno") or {}).items()))))
    p99 = out["lateness_p99_s"]
    if p99 is None or p99 >= COMPILED_MAX_P99_LATENESS_S:
        why.append("99th percentile lateness %s s (not under %s s)" % (p99, COMPILED_MAX_P99_LATENESS_S))
    cpu = out["user_s"] + out["system_s"]
    if out["wall_s"] <= 0 or cpu >= COMPILED_MAX_CPU_SHARE * out["wall_s"]:
        why.append("generator CPU %.3f s over %.3f s (not under %d %% of a core)"
                   % (cpu, out["wall_s"], 100 * COMPILED_MAX_CPU_SHARE))
    if out["snd_buf_errors"] != 0:  # None: not read, so nothing shows the kernel kept every query
        why.append("UdpSndbufErrors rose by %s" % out["snd_buf_errors"])
    if out["insert_failed"]:  # None: no conntrack in this namespace, nothing to fail
        why.append("conntrack insert_failed rose by %d" % out["insert_failed"])
    if out.get("errors"):
        why.append("kernel counters not read: %s" % "; ".join(out["errors"]))
    if out["sent"] != out["planned"]:
        why.append("sent %d of %d planned" % (out["sent"], out["planned"]))
    if not why and not out.get("valid", True):  # two copies of one rule: both must pass
        why.append("the generator's own verdict: %s" % out.get("invalid_because"))
    return not why, "; ".join(why)


def compiled_result(out):
    """The compiled generator's output as dnsgen.run's dict, plus what only
    it measures, judged by compiled_validity."""
    valid, why = compiled_validity(out)
    r = dict((k, out[k]) for k in (
        "rate", "seconds", "planned", "sent", "answered", "unanswered", "send_errors", "send_errno", "send_s",
        "wall_s", "lateness_p50_s", "lateness_p99_s", "lateness_max_s", "latency_p50_s", "latency_p99_s",
        "latency_max_s", "snd_buf_errors", "rcv_buf_errors", "insert_failed", "pool", "sched", "build"))
    r.update(generator_cpu_s=round(out["user_s"] + out["system_s"], 3), generator_user_s=out["user_s"],
             generator_system_s=out["system_s"], valid=valid, invalid_because=why)
    return r


class CompiledMissing(RuntimeError):
    """No compiled generator built from these sources."""


def go_sources_hash():
    """The hash lab/lab.sh's go_tool names the binary by (gotool.sources_hash)."""
    return gotool.sources_hash(GO_DIR)


def compiled_binary():
    """$HOMELAB_EDGE_CACHE/bin/dnsgen, when it is the build of the sources in
    this checkout; a binary of other sources is refused, not run: its figures
    would be another generator's."""
    return gotool.binary("dnsgen", GO_DIR, "DNS generator", CompiledMissing)


def compiled_command(binary, host, ports, rate, seconds, timeout, cpus=None, fifo=None, pool=None):
    cmd = [binary, "-json", "-target", host, "-ports", ",".join(str(p) for p in ports), "-rate", repr(float(rate)),
           "-seconds", repr(float(seconds)), "-timeout", repr(float(timeout))]
    if pool:
        cmd += ["-pool", str(pool)]
    if fifo:
        cmd += ["-fifo", str(fifo)]
    if cpus:
        cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(cpus))] + cmd
    return cmd


def run_compiled(host, ports, rate, seconds, timeout=2.0, cpus=None, fifo=None, pool=None):
    """One paced run of the compiled generator, pinned to `cpus` (a set, or
    None); `fifo` runs it under SCHED_FIFO at that priority (so a busy
    machine's other tasks cannot make it late), `pool` sets its sockets
    (default 4,096). Returns compiled_result's dict."""
    cmd = compiled_command(compiled_binary(), host, ports, rate, seconds, timeout, cpus, fifo, pool)
    # the binary stops sending at seconds x SEND_OVERRUN + 0.5 s and exits by that plus timeout + 1 s
    bound = seconds * MAX_OVERRUN + 0.5 + timeout + 5
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=bound, check=False)
    if p.returncode:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return compiled_result(json.loads(p.stdout))
