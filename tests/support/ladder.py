"""The ladder's rules (benchmarks/bench_k3d_ladder.py): when a step holds,
which rate comes next, what limit a configuration's steps show, and what
bound it. Pure functions over the steps' records, unit-tested in
tests/dev/test_ladder.py."""
import math
import random

# "holds": every rule below, on a step the generator itself calls valid (dnsgen.compiled_validity)
MIN_ANSWERED = 0.999      # of the queries sent
MAX_LATENCY_P99_S = 0.050  # the answers' 99th percentile, from each query's scheduled time
MIN_PROBES_OK = 0.99      # HTTPS and API probes through the same load balancer
BISECTIONS = 3            # after the first failing rate: halve the gap this many times
CPU_BOUND_SHARE = 0.90    # of the component's CPUs over the step: that component ran out of CPU


def holds(step):
    """(True/False, reasons) for a valid step; (None, why) when the generator
    was not valid: that step says nothing about the system under test."""
    if not step.get("valid"):
        return None, "generator invalid: %s" % step.get("invalid_because")
    why = []
    sent, answered = step.get("sent"), step.get("answered")
    if not (_count(sent) and _count(answered)) or not sent or answered < MIN_ANSWERED * sent or answered > sent:
        why.append("answered %s of %s (under %.1f %%)" % (answered, sent, 100 * MIN_ANSWERED))
    p99 = step.get("latency_p99_s")
    if not _figure(p99) or p99 >= MAX_LATENCY_P99_S:  # NaN >= 0.05 is False: a NaN held
        why.append("answers' p99 latency %s s (not under %s s)" % (p99, MAX_LATENCY_P99_S))
    if not _count(step.get("alerts")) or step["alerts"] > 0:
        why.append("%s 'not enough' lines" % step.get("alerts"))
    probed = step.get("probes")
    if probed is not None:
        why += _probe_problems(probed)
    return not why, "; ".join(why)


def _figure(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _count(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _probe_problems(probed):
    """Probes judged against the probes planned, not those that came back: an open-loop prober plans one probe
    per target per interval, and a probe that never ran (the prober starved of CPU) is no success."""
    planned, ok, failed = probed.get("planned"), probed.get("ok"), probed.get("failed")
    if not (_count(planned) and _count(ok) and _count(failed)):
        return ["probes planned %s, ok %s, failed %s: not counts" % (planned, ok, failed)]
    if ok + failed > planned:
        return ["probes ok %d + failed %d over the %d planned" % (ok, failed, planned)]
    if not planned or ok < MIN_PROBES_OK * planned:
        return ["probes ok %d of %d planned (under %d %%)" % (ok, planned, 100 * MIN_PROBES_OK)]
    return []


def next_rate(tried, start, factor=2.0, bisections=BISECTIONS, ceiling=None):
    """The next rate to offer, or None when the limit is found. `tried` is
    [(rate, held)] in order, held True/False/None (None: the generator was
    invalid there; the ladder stops, nothing above it can be judged).
    Rising by `factor` from `start` until a step fails, then bisecting
    between the highest held and the lowest failed rate `bisections` times.
    `ceiling`: the generator's proven top rate; the ladder never offers more."""
    if not tried:
        return start
    if any(h is None for r, h in tried):
        return None
    held = [r for r, h in tried if h]
    failed = [r for r, h in tried if h is False]
    if not failed:
        nxt = int(round(max(held) * factor))
        if ceiling is not None and nxt > ceiling:
            return ceiling if max(held) < ceiling else None
        return nxt
    high = min(failed)
    below = [r for r in held if r < high]
    low = max(below) if below else 0
    if len(tried) - 1 - first_failure(tried) >= bisections or high - low <= max(1, high // 100):
        return None
    mid = (low + high) // 2
    if mid in (low, high) or any(r == mid for r, h in tried):
        return None
    return mid


def first_failure(tried):
    return next(i for i, (r, h) in enumerate(tried) if h is False)


def limit(tried):
    """{"holds_at": highest rate held below every failure, "fails_at": lowest
    failed rate, "open": True when nothing failed (the limit is above)}."""
    failed = [r for r, h in tried if h is False]
    below = [r for r, h in tried if h and (not failed or r < min(failed))]
    return {"holds_at": max(below) if below else None, "fails_at": min(failed) if failed else None,
            "open": not failed}


def bound_by(step, cpus_of):
    """What ran out at a failing step: "connections" when nginx logged "not
    enough"; else the first component whose CPU over the step's wall time
    reached CPU_BOUND_SHARE of the CPUs it may use; else the components that
    share CPUs and together reached that share of them (two components on one
    core, each at half of it, ran it out); else "neither (latency or losses
    without a full CPU)". `cpus_of`: component -> the CPUs it may use, as a
    set of CPU numbers (components with the same set share them) or a count
    (CPUs of its own)."""
    if step.get("alerts"):
        return "connections"
    wall = step.get("wall_s") or 0
    used = dict((c, s) for c, s in (step.get("cpu_s") or {}).items() if _figure(s))
    if not wall:
        return "neither (latency or losses without a full CPU)"

    def size(comp):
        cpus = cpus_of.get(comp)
        return cpus if isinstance(cpus, int) else len(cpus or ())
    for comp, cpu_s in sorted(used.items(), key=lambda kv: -kv[1]):
        n = size(comp)
        if n and cpu_s >= CPU_BOUND_SHARE * n * wall:
            return "CPU (%s)" % comp
    groups = {}
    for comp in used:
        cpus = cpus_of.get(comp)
        if cpus and not isinstance(cpus, int):
            groups.setdefault(frozenset(cpus), []).append(comp)
    for cpus, comps in sorted(groups.items(), key=lambda kv: sorted(kv[1])):
        # every component confined to these CPUs (or to some of them) runs on them
        on = sorted(c for c in used if not isinstance(cpus_of.get(c), int) and cpus_of.get(c)
                    and frozenset(cpus_of[c]) <= cpus)
        if len(on) > 1 and sum(used[c] for c in on) >= CPU_BOUND_SHARE * len(cpus) * wall:
            return "CPU (%s together)" % " + ".join(c for c in sorted(on, key=lambda c: -used[c]) if used[c] > 0)
    return "neither (latency or losses without a full CPU)"


def orders(configs, repetitions, seed):
    """One random order of `configs` per repetition, reproducible from `seed`."""
    rnd = random.Random(seed)
    out = []
    for dummy in range(repetitions):
        one = list(configs)
        rnd.shuffle(one)
        out.append(one)
    return out
