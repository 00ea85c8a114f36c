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
"""
import multiprocessing
import os
import resource

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
