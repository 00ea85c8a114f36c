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


# ------------------------------------------------------------ issue 65: CPU per query, measured to a few percent
# Student's t, two-sided 95 % (the 0.975 quantile) by degrees of freedom; over 30 the normal's 1.96 is within 2 %
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
       21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


def _finite(x):
    """A number that may be negative (a difference), but finite and not a boolean."""
    return _number(x) and math.isfinite(x)


def t95(df):
    """The two-sided 95 % quantile of Student's t with `df` degrees of freedom (None below 1)."""
    if not isinstance(df, int) or df < 1:
        return None
    return T95.get(df, 1.96)


def mean_ci(values):
    """{"mean", "low", "high", "half", "n", "sd"}: the mean of the figures given and its 95 % confidence interval
    (Student's t, n - 1 degrees of freedom); low/high/half None with fewer than two figures."""
    xs = [float(v) for v in values if _finite(v)]
    n = len(xs)
    if not n:
        return {"mean": None, "low": None, "high": None, "half": None, "n": 0, "sd": None}
    m = sum(xs) / n
    if n < 2:
        return {"mean": m, "low": None, "high": None, "half": None, "n": 1, "sd": None}
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return {"mean": m, "low": m - half, "high": m + half, "half": half, "n": n, "sd": sd}


def paired(a, b):
    """Two configurations measured in the same repetitions ({repetition: figure} each): the difference a - b and
    the relative difference a / b - 1 per repetition (a repetition missing from either is left out), each with
    mean_ci. Pairing by repetition takes out what drifts between repetitions (the machine, the hour)."""
    reps = sorted(r for r in a if r in b and _figure(a[r]) and _figure(b[r]) and b[r] > 0)
    diff = [a[r] - b[r] for r in reps]
    rel = [a[r] / float(b[r]) - 1 for r in reps]
    return {"repetitions": reps, "difference": mean_ci(diff), "relative": mean_ci(rel)}


def slope_ci(points):
    """Least squares of y on x over [(x, y)] with the slope's 95 % interval (t with n - 2 degrees of freedom):
    {"slope", "intercept", "low", "high", "n"}; None with fewer than three points or two distinct x (no spread to
    estimate)."""
    pts = [(float(x), float(y)) for x, y in points if _finite(x) and _finite(y)]
    n = len(pts)
    if n < 3 or len(set(x for x, y in pts)) < 2:
        return None
    mx, my = sum(x for x, y in pts) / n, sum(y for x, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, y in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    intercept = my - slope * mx
    resid = sum((y - intercept - slope * x) ** 2 for x, y in pts)
    half = t95(n - 2) * math.sqrt(resid / (n - 2) / sxx)
    return {"slope": slope, "intercept": intercept, "low": slope - half, "high": slope + half, "n": n}


def within(rel, share):
    """True when a relative difference's whole interval lies under `share` (its upper end, not its mean: "within 5 %"
    holds only when the measurement rules out more); None without an interval."""
    if not rel or rel.get("high") is None:
        return None
    return rel["high"] <= share


def abab(configs, repetitions):
    """The configurations' order per repetition, reversed every other one (A B C D, D C B A, A B C D, ...): each
    configuration's mean position is the same, so a drift over the run weighs on none more than another."""
    return [list(configs) if rep % 2 == 0 else list(reversed(configs)) for rep in range(repetitions)]


# a step of the CPU-per-query part counts only when nothing else ran on the load balancer's CPU: the CPU's busy time
# (/proc/stat, tick-sampled) beyond the load balancer's own cgroup at most this share of the step's wall time
MAX_DISTURBANCE = 0.03
MAX_OTHER_CPU_BUSY = 0.90  # the generator's and the DNS server's CPU: busier than this, they were near its limit


def cpu_step_problems(step):
    """Why a step of the CPU-per-query part measures something other than the load balancer's cost per query
    (empty: it measures it): the generator not valid by its own rules, the load balancer's CPU used by something
    else meanwhile (`disturbance_share` over MAX_DISTURBANCE), the other CPU near full (`other_cpu_busy_share`),
    or figures missing. Such a step is run again and kept, marked."""
    why = []
    if step.get("valid") is not True:
        why.append("generator invalid: %s" % step.get("invalid_because"))
    for k in ("lb_cpu_s", "answered", "disturbance_share", "other_cpu_busy_share"):
        if not _figure(step.get(k)):
            why.append("%s is not a figure: %r" % (k, step.get(k)))
    if not why and step["answered"] == 0:
        why.append("nothing answered")
    if _figure(step.get("disturbance_share")) and step["disturbance_share"] > MAX_DISTURBANCE:
        why.append("the load balancer's CPU busy %.1f %% of the step beyond its own cgroup (over %g %%)"
                   % (100 * step["disturbance_share"], 100 * MAX_DISTURBANCE))
    if _figure(step.get("other_cpu_busy_share")) and step["other_cpu_busy_share"] > MAX_OTHER_CPU_BUSY:
        why.append("the generator's CPU busy %.1f %% (over %g %%)" % (100 * step["other_cpu_busy_share"],
                                                                    100 * MAX_OTHER_CPU_BUSY))
    return why


def below_saturation(step):
    """A step whose load the load balancer carried whole: MIN_ANSWERED of the queries answered, p99 under
    MAX_LATENCY_P99_S, no "not enough" line. Its cost per query is the load balancer's price of a query; a step
    that lost queries (stock, out of connections) prices what it did with the rest."""
    sent = step.get("sent")
    return (_count(sent) and sent > 0 and _count(step.get("answered")) and step["answered"] >= MIN_ANSWERED * sent
            and _figure(step.get("latency_p99_s")) and step["latency_p99_s"] < MAX_LATENCY_P99_S
            and step.get("alerts") == 0)


def us_per_query(step):
    """The load balancer's CPU microseconds per answered query over a step (None without figures)."""
    if not (_figure(step.get("lb_cpu_s")) and _count(step.get("answered")) and step["answered"] > 0):
        return None
    return 1e6 * step["lb_cpu_s"] / step["answered"]


def cpu_summary(steps, configs, rates, pairs):
    """The CPU-per-query part's figures from its valid steps: per configuration and rate, us per answered query
    with mean_ci over the repetitions; per configuration the marginal cost (slope_ci of CPU-seconds per second on
    answered queries per second, over every valid step); for each (a, b) of `pairs`, paired() per rate and over
    the rates (the mean of each repetition's relative differences at every rate)."""
    good = [s for s in steps if not cpu_step_problems(s)]
    out = {"configs": {}, "pairs": {}}
    for c in configs:
        mine = [s for s in good if s["config"] == c]
        per_rate = {}
        for rate in rates:
            at = [s for s in mine if s["rate"] == rate]
            per_rate[str(rate)] = dict(mean_ci([us_per_query(s) for s in at]),
                                       below_saturation=all(below_saturation(s) for s in at) if at else None)
        slope = slope_ci([(s["answered"] / s["wall_s"], s["lb_cpu_s"] / s["wall_s"]) for s in mine
                          if _figure(s.get("wall_s")) and s["wall_s"] > 0])
        out["configs"][c] = {"per_rate": per_rate, "marginal": slope, "steps": len(mine)}
    for a, b in pairs:
        per_rate, overall = {}, {}
        for rate in rates:
            fa = dict((s["repetition"], us_per_query(s)) for s in good if s["config"] == a and s["rate"] == rate)
            fb = dict((s["repetition"], us_per_query(s)) for s in good if s["config"] == b and s["rate"] == rate)
            per_rate[str(rate)] = paired(fa, fb)
            for rep in per_rate[str(rate)]["repetitions"]:
                overall.setdefault(rep, []).append(fa[rep] / fb[rep] - 1)
        rel = mean_ci([sum(v) / len(v) for v in overall.values()])
        out["pairs"]["%s vs %s" % (a, b)] = {"a": a, "b": b, "per_rate": per_rate, "relative_over_rates": rel}
    return out
