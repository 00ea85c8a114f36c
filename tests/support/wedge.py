"""Seed 001's wedge, judged from per-second rows (benchmarks/bench_nas_wedge.py):
pure functions, no lab. A run's rows come from three sources, each keyed by
the second since the run started:

  the NAS's sampler (tests/support/programs/host_sampler.py --cpu N): the NAS's core by mode, conntrack, Traefik's
      own namespace (sockets, TIME_WAIT, orphans, listen overflows), Traefik's CPU and throttling;
  the LAN's probes (probe_loop.py): services behind Traefik (HTTPS through it) and beside it (sshd's banner);
  the generator's timeline (tlsgen -timeline): connections started, answered and failed per second.

The verdict follows the issue's bar: "before" is dark - no probe behind Traefik answered - for at least
DARK_BAR_S seconds after the flood stopped, with the core's system (+softirq) CPU above its user CPU during that
dark time. A run whose prober or sampler missed seconds, or whose generator was invalid, proves nothing.
"""

from outage import served  # noqa: E402  (one home: a probe the monitoring would call up)

DARK_BAR_S = 60          # dark this long after the flood: reproduced (with system above user meanwhile)
HEALTHY_RUN_S = 10       # recovered: every probe behind Traefik answered for this many seconds in a row
MAX_GAP_SHARE = 0.05     # seconds with no probe behind Traefik sent, or no sample: more than this share: invalid

SAMPLE_KEYS = ("cpu_pct", "conntrack", "ns_conntrack", "ns_tcp_inuse", "ns_orphan", "ns_time_wait", "time_wait",
               "fin_wait", "listen_overflows", "listen_drops", "nr_throttled", "throttled_usec")
FLOOD_KEYS = ("started", "connected", "handshakes", "ok_2xx", "r429", "other_code", "failed", "open")


def rows(t0, seconds, samples, probes, floods, behind, beside):
    """One dict per second 0 .. seconds-1: the sample of that second (flattened: core_user, core_system, ...), per
    probe target `<name>_sent` and `<name>_ok`, and the flood's counters summed over its steps (`flood_<key>`).
    `floods`: [(step start, epoch seconds; the generator's timeline)]."""
    out = [{"t": s} for s in range(int(seconds))]

    def at(t):
        s = int(t - t0)
        return out[s] if 0 <= s < len(out) else None
    for sample in samples:
        row = at(sample["t"])
        if row is None:
            continue
        row["sampled"] = True
        row.update((k, sample.get(k)) for k in SAMPLE_KEYS)
        for mode, pct in (sample.get("core") or {}).items():
            row["core_%s" % mode] = pct
    for name in behind + beside:
        for row in out:
            row["%s_sent" % name] = row["%s_ok" % name] = 0
    for probe in probes:
        row = at(probe["t"])
        if row is None or probe["target"] not in behind + beside:
            continue
        row["%s_sent" % probe["target"]] += 1
        row["%s_ok" % probe["target"]] += 1 if served(probe) else 0
    for start, timeline in floods:
        for entry in timeline:
            row = at(start + entry["s"])
            if row is None:
                continue
            for k in FLOOD_KEYS:
                row["flood_%s" % k] = row.get("flood_%s" % k, 0) + (entry.get(k) or 0)
    return out


def state(row, behind):
    """'dark' (probes behind Traefik sent, none answered), 'healthy' (every one answered), 'partial', or None (no
    probe behind Traefik sent that second: the prober missed it)."""
    sent = sum(row.get("%s_sent" % n, 0) for n in behind)
    ok = sum(row.get("%s_ok" % n, 0) for n in behind)
    if sent == 0:
        return None
    return "dark" if ok == 0 else "healthy" if ok == sent else "partial"


def aftermath(rows_, flood_end_s, behind, beside=()):
    """What the flood left: the dark seconds after it ended (the longest dark stretch among them too), the seconds
    until HEALTHY_RUN_S healthy seconds in a row began, the core's CPU by mode over those dark seconds, and the
    services beside Traefik over the same seconds. Seconds with no probe are neither dark nor healthy."""
    after = [r for r in rows_ if r["t"] >= flood_end_s]
    states = [state(r, behind) for r in after]
    dark = [r for r, s in zip(after, states) if s == "dark"]
    longest = run = 0
    for s in states:
        run = run + 1 if s == "dark" else 0 if s is not None else run
        longest = max(longest, run)
    recovered = None
    for i in range(len(after)):
        window = states[i:i + HEALTHY_RUN_S]
        if len(window) == HEALTHY_RUN_S and all(s == "healthy" for s in window):
            recovered = after[i]["t"] - flood_end_s
            break

    def mean(key, of):
        values = [r.get(key) for r in of if r.get(key) is not None]
        return round(sum(values) / len(values), 1) if values else None
    cpu = dict((m, mean("core_%s" % m, dark)) for m in ("user", "system", "softirq", "idle"))
    kernel = None if cpu["system"] is None or cpu["softirq"] is None else round(cpu["system"] + cpu["softirq"], 1)
    beside_ok = dict((n, (sum(r.get("%s_ok" % n, 0) for r in dark), sum(r.get("%s_sent" % n, 0) for r in dark)))
                     for n in beside)
    return {"dark_after_flood_s": len(dark), "longest_dark_after_flood_s": longest,
            "recovered_after_flood_s": recovered, "observed_after_flood_s": len(after),
            "cpu_while_dark": dict(cpu, kernel=kernel),
            "system_above_user_while_dark": None if kernel is None or cpu["user"] is None else kernel > cpu["user"],
            "beside_answered_while_dark": beside_ok}


def gaps(rows_, behind):
    """Seconds the prober sent nothing behind Traefik, and seconds with no sample."""
    return {"no_probe": sum(1 for r in rows_ if state(r, behind) is None),
            "no_sample": sum(1 for r in rows_ if not r.get("sampled"))}


def verdict(rows_, flood_end_s, behind, beside, generator_results):
    """The run's verdict: invalid (with why), else reproduced or not, with the aftermath's figures."""
    why = []
    g = gaps(rows_, behind)
    if not rows_:
        why.append("no rows")
    for key, n in sorted(g.items()):
        if rows_ and n > MAX_GAP_SHARE * len(rows_):
            why.append("%d of %d seconds with %s" % (n, len(rows_), key.replace("_", " ")))
    bad = [r for r in generator_results if not r.get("valid")]
    if not generator_results:
        why.append("no generator results")
    if bad:
        why.append("generator invalid at %s: %s" % (
            ", ".join(str(r.get("rate")) for r in bad), "; ".join(sorted(set(r.get("invalid_because") or "?"
                                                                            for r in bad)))))
    after = aftermath(rows_, flood_end_s, behind, beside) if rows_ else {}
    reproduced = (not why and after["longest_dark_after_flood_s"] >= DARK_BAR_S
                  and after["system_above_user_while_dark"] is True)
    return dict(after, gaps=g, valid=not why, invalid_because="; ".join(why) or None, reproduced=reproduced)


def mean_of(rows_, key, start_s, end_s):
    """The mean of a per-second figure over [start_s, end_s) (seconds with none left out), or None."""
    values = [r[key] for r in rows_ if start_s <= r["t"] < end_s and r.get(key) is not None]
    return round(sum(values) / len(values), 1) if values else None


def value_at(rows_, key, t):
    """The figure at second t, or at the first second after it that has one (None if none does)."""
    return next((r[key] for r in rows_ if r["t"] >= t and r.get(key) is not None), None)


def below_after(rows_, key, flood_end_s, bound):
    """Seconds from the flood's end until the figure first fell under `bound` (None: not within the rows)."""
    return next((r["t"] - flood_end_s for r in rows_ if r["t"] >= flood_end_s and r.get(key) is not None
                 and r[key] < bound), None)
