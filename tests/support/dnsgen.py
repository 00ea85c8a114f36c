"""A DNS load generator that says when it was the bottleneck.

Each query goes from a fresh UDP socket (a new source port: a new nginx
session, as in seed 000), on an absolute schedule: query i is due at
start + i/rate, and the clock is read before every send. It runs in a
process of its own, pinned to the CPUs it is given, and returns what it
planned, sent and got back, how long sending took and its own CPU time.

A run is valid only when the generator kept up: sent at least
MIN_SENT_SHARE of the planned queries, none of them refused by the kernel
(a send error is a query that never left), finished sending within
MAX_OVERRUN of the planned time (and no faster than its schedule allows),
sent 99 % of its queries within MAX_P99_LATENESS_S of their due time and
every one within MAX_LATENESS_S, and no stall held back more than MAX_BURST
queries to go out at once (a stall followed by a burst is not the planned
load). Every figure is a finite number, none negative, none missing. An
invalid run is a fact about the generator and this machine, never a figure
about the system under test.

Targets are only loopback or the lab's own containers; every run is
bounded by its planned time x MAX_OVERRUN plus the reply timeout.

run_compiled does the same with the compiled generator (loadgen_go/cmd/dnsgen,
for rates Python cannot reach, and each answer's latency), under a stricter
rule (compiled_validity).
"""
import math
import multiprocessing
import os
import resource

import ladder
import loadgen
import probes

MIN_SENT_SHARE = 0.98
MAX_OVERRUN = probes.SEND_OVERRUN
MAX_P99_LATENESS_S = 0.1
MAX_LATENESS_S = 0.5  # every query: a single stall longer than this is not the planned load, however rare
MAX_BURST = 200       # queries one stall may hold back to send at once (the longest lateness x the rate)
SEND_S_ROUNDING = 0.01  # probes.dns_load rounds send_s to the hundredth


def is_figure(x):
    """A finite number, not negative, not a boolean: what every count and time of a run must be."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def not_figures(named):
    """The names of `named` ({name: value}) whose value is no figure (NaN, infinite, negative, missing)."""
    return sorted(k for k, v in named.items() if not is_figure(v))


def worst_lateness_problems(rate, p99, worst, max_worst, max_burst):
    """Why a run's worst lateness says it was not the planned load, whatever its 99th percentile: over
    `max_worst`, under its own 99th percentile (figures that contradict each other), or a stall that held back
    more than `max_burst` queries, which then went out together (the worst lateness x the rate)."""
    if worst is None or worst >= max_worst:
        return ["worst lateness %s s (not under %s s)" % (worst, max_worst)]
    if p99 is not None and worst < p99:
        return ["worst lateness %s s under its 99th percentile %s s" % (worst, p99)]
    if worst * rate > max_burst:
        return ["a stall of %s s held back %d queries sent as one burst (over %d)"
                % (worst, int(worst * rate), max_burst)]
    return []


def validity(planned, sent, send_s, seconds, send_errors=0, lateness_p99_s=0.0, lateness_max_s=None):
    """(valid, why) for a run that planned `planned` queries over `seconds`."""
    bad = not_figures({"planned": planned, "sent": sent, "send_s": send_s, "seconds": seconds,
                       "send_errors": send_errors, "lateness_p99_s": lateness_p99_s,
                       "lateness_max_s": lateness_max_s})
    if bad or not planned or not seconds:
        return False, "not a finite, non-negative figure: %s" % ", ".join(bad or ["planned or seconds is 0"])
    why = []
    if sent - send_errors < MIN_SENT_SHARE * planned:
        why.append("sent %d of %d planned (under %d %%)" % (sent - send_errors, planned, 100 * MIN_SENT_SHARE))
    if send_errors:
        why.append("%d sends refused by the kernel" % send_errors)
    if lateness_p99_s > MAX_P99_LATENESS_S:
        why.append("99th percentile lateness %s s (over %s s)" % (lateness_p99_s, MAX_P99_LATENESS_S))
    rate = planned / float(seconds)
    why += worst_lateness_problems(rate, lateness_p99_s, lateness_max_s, MAX_LATENESS_S, MAX_BURST)
    if send_s > MAX_OVERRUN * seconds:
        why.append("sending took %.1f s for %.1f s planned (over %d %%)" % (send_s, seconds, 100 * (MAX_OVERRUN - 1)))
    if send_s < too_fast(sent, rate):
        why.append("%d queries sent in %s s: faster than %s q/s allows" % (sent, send_s, rate))
    return not why, "; ".join(why)


def too_fast(sent, rate, rounding=SEND_S_ROUNDING):
    """The least send_s `sent` queries on the absolute schedule can take: the last is due at (sent - 1) / rate."""
    return max(0, sent - 1) / float(rate) - rounding


def _run(host, ports, rate, seconds, timeout):
    planned = int(round(rate * seconds))
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    r = probes.dns_load(host, ports, rate, planned, timeout=timeout)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    valid, why = validity(planned, r["sent"], r["send_s"], seconds, r["send_errors"], r["lateness_p99_s"],
                          r["lateness_max_s"])
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


# The compiled generator (tests/support/loadgen_go/cmd/dnsgen, built by `lab/lab.sh
# gobins` into $HOMELAB_EDGE_CACHE/bin/dnsgen; loadgen.py): the same plan and the same
# fresh source port per query, at rates Python cannot reach, with each
# answer's latency. It is judged harder than the Python generator, because it
# claims more: a compiled sender that is 1 ms late at p99 (or 10 ms late
# once), near a core's worth of CPU while it sends, or dropped by its own
# kernel is not pacing, and what it measured is (partly) itself.
COMPILED_MAX_P99_LATENESS_S = 0.001
COMPILED_MAX_LATENESS_S = 0.010
COMPILED_MAX_BURST = 64        # queries one stall may hold back (at 16,000 q/s: a stall of 4 ms)
COMPILED_MAX_CPU_SHARE = 0.70  # of one core, over the sending interval (send_s: not the reply-timeout tail)
GO_DIR = loadgen.GO_DIR  # the Go module; the generator is its ./cmd/dnsgen
# the figures every output must hold as finite, non-negative numbers
COMPILED_FIGURES = ("rate", "seconds", "planned", "sent", "answered", "unanswered", "send_errors", "send_s",
                    "wall_s", "user_s", "system_s", "lateness_p50_s", "lateness_p99_s", "lateness_max_s", "pool",
                    "timeout")
POOL_EXHAUSTED = "pool_exhausted"
POOL_LATENCY_S, POOL_MARGIN = ladder.MAX_LATENCY_P99_S, 4  # a target that holds answers within this; the margin


def pool_dried_by_the_target(out):
    """True when every send error is a dry pool, the pool was ample for a target that holds (POOL_MARGIN times
    the sockets one answering within POOL_LATENCY_S needs: rate x that, Little's law) and the target's
    unanswered queries could dry it (each holds its socket for the whole reply timeout: rate x timeout over the
    pool). Such a run sent its plan on schedule as far as the generator goes: the queries that found no socket are
    the system's failure (sent, never answered), not the generator's."""
    errno = out.get("send_errno") or {}
    if not out["send_errors"] or set(errno) != {POOL_EXHAUSTED} or errno[POOL_EXHAUSTED] != out["send_errors"]:
        return False
    ample = out["pool"] >= POOL_MARGIN * out["rate"] * POOL_LATENCY_S
    return out["unanswered"] > 0 and ample and out["rate"] * out["timeout"] > out["pool"]


def compiled_validity(out):
    """(valid, why) for the compiled generator's JSON output `out`. Stray replies (stray_note) leave a run valid;
    `why` then reports them."""
    bad = [k for k in COMPILED_FIGURES if not is_figure(out.get(k))]
    if bad or not out.get("planned") or not out.get("rate") or not out.get("seconds"):
        return False, "not a finite, non-negative figure: %s" % ", ".join(bad or ["planned, rate or seconds is 0"])
    why = []
    system_failure = pool_dried_by_the_target(out)
    if out["send_errors"] and not system_failure:
        why.append("%d send errors (%s)" % (out["send_errors"], loadgen.counts_text(out.get("send_errno"))))
    p99 = out["lateness_p99_s"]
    if p99 >= COMPILED_MAX_P99_LATENESS_S:
        why.append("99th percentile lateness %s s (not under %s s)" % (p99, COMPILED_MAX_P99_LATENESS_S))
    why += worst_lateness_problems(out["rate"], p99, out["lateness_max_s"], COMPILED_MAX_LATENESS_S,
                                   COMPILED_MAX_BURST)
    cpu = out["user_s"] + out["system_s"]
    if out["send_s"] <= 0 or cpu >= COMPILED_MAX_CPU_SHARE * out["send_s"]:
        why.append("generator CPU %.3f s over %.3f s of sending (not under %d %% of a core)"
                   % (cpu, out["send_s"], 100 * COMPILED_MAX_CPU_SHARE))
    if out["send_s"] > MAX_OVERRUN * out["seconds"]:
        why.append("sending took %s s for %s s planned (over %d %%)"
                   % (out["send_s"], out["seconds"], round(100 * (MAX_OVERRUN - 1))))
    if out["send_s"] < too_fast(out["sent"], out["rate"], rounding=1e-6):
        why.append("%d queries sent in %s s: faster than %s q/s allows" % (out["sent"], out["send_s"], out["rate"]))
    if out.get("snd_buf_errors") != 0:  # None: not read, so nothing shows the kernel kept every query
        why.append("UdpSndbufErrors rose by %s" % out.get("snd_buf_errors"))
    if out.get("insert_failed"):  # None: no conntrack in this namespace, nothing to fail
        why.append("conntrack insert_failed rose by %s" % out["insert_failed"])
    if out.get("errors"):
        why.append("kernel counters not read: %s" % "; ".join(out["errors"]))
    if out["sent"] != out["planned"]:
        why.append("sent %d of %d planned" % (out["sent"], out["planned"]))
    if out["answered"] + out["unanswered"] + out["send_errors"] != out["sent"]:
        why.append("answered %d + unanswered %d + send errors %d is not the %d sent"
                   % (out["answered"], out["unanswered"], out["send_errors"], out["sent"]))
    loadgen.own_verdict(out, why)
    return not why, "; ".join(why + stray_note(out))


def stray_note(out):
    """A report of the replies that came on a socket while another query was in flight on it (late replies to an
    earlier query from the same source port, issue 52): the generator counted none of them as an answer, so the
    run stays valid, but they say a target answered after the query's timeout."""
    stray = out.get("stray_replies") or 0
    if not stray:
        return []
    return ["%d stray replies (late replies to an earlier query from a reused source port; none counted as an "
            "answer)" % stray]


def compiled_result(out):
    """The compiled generator's output as dnsgen.run's dict, plus what only
    it measures, judged by compiled_validity."""
    valid, why = compiled_validity(out)
    r = dict((k, out[k]) for k in (
        "rate", "seconds", "planned", "sent", "answered", "unanswered", "send_errors", "send_errno", "send_s",
        "wall_s", "lateness_p50_s", "lateness_p99_s", "lateness_max_s", "latency_p50_s", "latency_p99_s",
        "latency_max_s", "snd_buf_errors", "rcv_buf_errors", "insert_failed", "pool", "sched", "build"))
    r.update(stray_replies=out.get("stray_replies", 0),  # 0: a generator of before issue 52 counted none
             # issue 65: the least time between wake-ups while sending, the wake-ups, and where a reply's time came
             # from (None: a generator of before it, which woke for each reply and read the clock then)
             tick_s=out.get("tick_s"), wakes=out.get("wakes"), reply_at=out.get("reply_at"),
             late_replies=out.get("late_replies"),
             latency_from=out.get("latency_from", "the send (a generator of before issue 51): answers only"),
             generator_cpu_s=round(out["user_s"] + out["system_s"], 3), generator_user_s=out["user_s"],
             generator_system_s=out["system_s"], valid=valid, invalid_because=why)
    return r


class CompiledMissing(loadgen.Missing):
    """No compiled DNS generator built from these sources."""


COMPILED = loadgen.Generator("dnsgen", "DNS generator", CompiledMissing)
# go_sources_hash(): the hash lab/lab.sh's go_tool names the binary by; compiled_binary():
# $HOMELAB_EDGE_CACHE/bin/dnsgen when it is the build of these sources (else CompiledMissing)
go_sources_hash, compiled_binary = COMPILED.sources_hash, COMPILED.binary


def compiled_command(binary, host, ports, rate, seconds, timeout, cpus=None, fifo=None, pool=None, tick=None):
    cmd = [binary, "-json", "-target", host, "-ports", ",".join(str(p) for p in ports), "-rate", repr(float(rate)),
           "-seconds", repr(float(seconds)), "-timeout", repr(float(timeout))]
    if pool:
        cmd += ["-pool", str(pool)]
    if tick:
        cmd += ["-tick", repr(float(tick))]
    if fifo:
        cmd += ["-fifo", str(fifo)]
    return loadgen.pinned(cmd, cpus)


def run_compiled(host, ports, rate, seconds, timeout=2.0, cpus=None, fifo=None, pool=None, tick=None, binary=None):
    """One paced run of the compiled generator, pinned to `cpus` (a set, or
    None); `fifo` runs it under SCHED_FIFO at that priority (so a busy
    machine's other tasks cannot make it late), `pool` sets its sockets
    (default 4,096), `tick` the least seconds between its wake-ups while
    sending (default 0: each query when due), `binary` another build (an
    earlier one, to compare). Returns compiled_result's dict."""
    cmd = compiled_command(binary or compiled_binary(), host, ports, rate, seconds, timeout, cpus, fifo, pool, tick)
    # the binary stops sending at seconds x SEND_OVERRUN + 0.5 s and exits by that plus timeout + 1 s
    bound = seconds * MAX_OVERRUN + 0.5 + timeout + 5
    return compiled_result(loadgen.run_json(cmd, bound))
