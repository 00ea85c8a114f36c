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


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


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
    set of CPU numbers (components with the same set share them) or a number
    of CPUs of its own (0.1: a CPU quota of a tenth of one core)."""
    if step.get("alerts"):
        return "connections"
    wall = step.get("wall_s") or 0
    used = dict((c, s) for c, s in (step.get("cpu_s") or {}).items() if _figure(s))
    if not wall:
        return "neither (latency or losses without a full CPU)"

    def size(comp):
        cpus = cpus_of.get(comp)
        return cpus if _number(cpus) else len(cpus or ())
    for comp, cpu_s in sorted(used.items(), key=lambda kv: -kv[1]):
        n = size(comp)
        if n and cpu_s >= CPU_BOUND_SHARE * n * wall:
            return "CPU (%s)" % comp
    groups = {}
    for comp in used:
        cpus = cpus_of.get(comp)
        if cpus and not _number(cpus):
            groups.setdefault(frozenset(cpus), []).append(comp)
    for cpus, comps in sorted(groups.items(), key=lambda kv: sorted(kv[1])):
        # every component confined to these CPUs (or to some of them) runs on them
        on = sorted(c for c in used if not _number(cpus_of.get(c)) and cpus_of.get(c)
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


UNSATURATED_THROTTLED = 0.05  # a step where the quota throttled under this share of periods: below saturation


def unsaturated(step):
    """A step that held with its load balancer rarely throttled: a point of the service-demand regression (at
    saturation its CPU is the quota, whatever the queries)."""
    t = step.get("throttling") or {}
    periods, throttled = t.get("nr_periods"), t.get("nr_throttled")
    return bool(step.get("holds")) and _figure(periods) and periods > 0 and _figure(throttled) and \
        throttled < UNSATURATED_THROTTLED * periods


def spread(values):
    """{"median", "min", "max", "n"} of the figures given (None and non-figures left out); the median of an even
    count is the mean of the middle two, never the more favourable one."""
    xs = sorted(v for v in values if _figure(v))
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2.0
    return {"median": med, "min": xs[0], "max": xs[-1], "n": len(xs)}


def ratios(a, b):
    """Each repetition's a / b (pairs by position; a pair with a missing or zero figure left out), with spread()."""
    out = [x / float(y) for x, y in zip(a, b) if _figure(x) and _figure(y) and y > 0]
    return dict(spread(out), each=[round(r, 3) for r in out])


def service_demand(points):
    """Least squares of CPU seconds against queries answered, over steps below saturation: [(answered, cpu_s)] ->
    {"per_query_s": slope, "fixed_s": intercept, "points": n}, or None with fewer than two distinct counts
    (nothing to regress). The slope is the component's CPU-seconds per query."""
    pts = [(float(n), float(c)) for n, c in points if _figure(n) and _figure(c)]
    if len(set(n for n, c in pts)) < 2:
        return None
    k = float(len(pts))
    mx, my = sum(n for n, c in pts) / k, sum(c for n, c in pts) / k
    sxx = sum((n - mx) ** 2 for n, c in pts)
    slope = sum((n - mx) * (c - my) for n, c in pts) / sxx
    return {"per_query_s": slope, "fixed_s": my - slope * mx, "points": len(pts)}


AGREE_WITHIN = 0.25  # a capacity computed from service demand agrees with the ladder within this share


def capacity_agrees(cores, per_query_s, holds_at, fails_at, fixed_cores=0.0):
    """The capacity `cores` of CPU serve at `per_query_s` each, after `fixed_cores` of it go to work that does not
    grow with the queries (the regression's intercept over the step's wall time: the probes' connections, nginx's
    own timers) - computed: (cores - fixed_cores) / per_query_s - and whether it agrees with the ladder: inside
    [holds_at x (1 - AGREE_WITHIN), fails_at x (1 + AGREE_WITHIN)]."""
    if not (_figure(cores) and _figure(per_query_s) and per_query_s > 0 and _figure(holds_at)):
        return {"computed_qps": None, "agrees": False}
    cap = max(0.0, cores - (fixed_cores if _figure(fixed_cores) else 0.0)) / per_query_s
    high = (fails_at if _figure(fails_at) else holds_at) * (1 + AGREE_WITHIN)
    return {"computed_qps": round(cap), "agrees": holds_at * (1 - AGREE_WITHIN) <= cap <= high}


def headroom(available_cores, used_cpu_s, wall_s):
    """How many times its use a component's CPU could carry: available / (used / wall); None without a figure.
    A limit placed by design leaves the generator and the DNS server at least 5x."""
    if not (_figure(available_cores) and _figure(used_cpu_s) and _figure(wall_s) and wall_s > 0):
        return None
    used = used_cpu_s / wall_s
    return None if used == 0 else available_cores / used


def alternating(pair, others, repetitions):
    """The pair's two configurations interleaved, alternating which goes first repetition by repetition (A B,
    B A, A B: ABBA, counterbalanced against drift), the others after them. With others, no configuration runs
    twice in a row; without, the pair's second runs twice at each turn (A B B A)."""
    out = []
    for rep in range(repetitions):
        first = list(pair) if rep % 2 == 0 else list(reversed(pair))
        out.append(first + list(others))
    return out
