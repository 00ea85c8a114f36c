# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""homelab.edge.prove: pure logic. The bounds of each active check (what it
may send, for how long), when a check must not run at all, and the verdict
on what it measured. The sockets live in prove_net; the modules only read,
plan, run and report with these.

Every check ends in one of STATUSES:
  proved   - measured what the fix promises
  failed   - measured something else (the reasons say what)
  refused  - not run: running it could do harm, or its input is out of bounds
  skipped  - not run: nothing to check here (the reason says why)
  planned  - check mode: what would run, and its bounds
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

PROVED, FAILED, REFUSED, SKIPPED, PLANNED = "proved", "failed", "refused", "skipped", "planned"
STATUSES = (PROVED, FAILED, REFUSED, SKIPPED, PLANNED)

# Hard bounds no option can pass: each check stays small and short.
K3D_MAX_COUNT = 5000
K3D_MAX_RATE = 500
K3D_MAX_SHARE = 50          # % of the UDP budget the planned sessions may take at most
CONNLIMIT_MAX_TOTAL = 2000  # connections held at once toward one port
CONNLIMIT_MAX_HOLD_S = 30
BUCKET_MAX_REFILL_S = 120   # the longest the many-source check waits for the VPS's rate bound to refill
INFLIGHT_MAX_TOTAL = 2000   # requests sent at once through Traefik
INFLIGHT_MAX_TIMEOUT_S = 60
MAX_TIMEOUT_S = 10


class PlanError(ValueError):
    """Input outside a check's bounds: the check is refused, nothing is sent."""


def _between(name, value, low, high):
    if not low <= value <= high:
        raise PlanError("%s is %s; it must be between %s and %s" % (name, value, low, high))


def k3d_plan(rate, count, timeout, udp_timeout, udp_budget, max_share):
    """The DNS check through one load balancer: `count` queries at `rate`/s,
    each from a fresh source port. The sessions it can hold at once are at
    most rate x udp_timeout (each expires after udp_timeout, sooner when
    answered); they must stay under max_share % of the UDP budget, so the
    check is harmless on a fixed load balancer. The bound is the planned
    time x 1.5 plus the reply timeout and 5 s."""
    _between("the query count", count, 1, K3D_MAX_COUNT)
    _between("the query rate", rate, 1, K3D_MAX_RATE)
    _between("the reply timeout", timeout, 0.1, MAX_TIMEOUT_S)
    _between("the share of the UDP budget", max_share, 1, K3D_MAX_SHARE)
    sessions = min(count, int(math.ceil(rate * udp_timeout)))
    allowed = int(udp_budget * max_share // 100)
    if sessions > allowed:
        fits = max(1, allowed // max(udp_timeout, 1))
        raise PlanError("%d queries/s for %d s of UDP timeout hold up to %d sessions, over %d %% of the UDP budget "
                        "(%d): lower the rate to %d/s or less" % (rate, udp_timeout, sessions, max_share, udp_budget, fits))
    seconds = count / float(rate)
    return {"rate": rate, "count": count, "seconds": round(seconds, 2), "timeout_s": timeout,
            "peak_sessions": sessions, "sessions_allowed": allowed,
            "bound_s": round(seconds * 1.5 + timeout + 5, 1)}


def _first(items, n):
    return "; ".join(items[:n]) + ("; and %d more" % (len(items) - n) if len(items) > n else "")


def k3d_refusal(entry):
    """Why the DNS check must not run against this load balancer (its entry
    from k3d_signals.signals), or None. Load on a load balancer that
    is not fixed would start the outage the check means to prove absent."""
    if not entry.get("running", True):
        return "%s is not running" % entry["name"]
    if entry.get("error"):
        return "%s could not be read: %s" % (entry["name"], entry["error"])
    if entry.get("state") == "not_fixed":
        return ("%s is not fixed (%s): DNS load would fill its connections and start the outage this check proves "
                "absent. Apply the fix first (homelab.edge.site --tags k3d)"
                % (entry["name"], _first(entry.get("drift") or ["its template lacks the fix"], 3)))
    return None


def k3d_verdict(measured, worker_connections, max_share):
    """(status, reasons) of one load balancer's DNS check: every query sent
    and answered, no "not enough" line in its log over the run, every probe
    of its TCP ports answered, and its busiest worker's connections under
    max_share % of worker_connections."""
    why = []
    if measured["send_errors"]:
        why.append("%d queries refused by this host's kernel" % measured["send_errors"])
    if measured["sent"] < measured["planned"]:
        why.append("sent %d of %d planned in the bound" % (measured["sent"], measured["planned"]))
    if measured["answered"] < measured["sent"]:
        why.append("%d of %d queries unanswered" % (measured["sent"] - measured["answered"], measured["sent"]))
    if measured["not_enough"]:
        why.append('%d "worker_connections are not enough" lines' % measured["not_enough"])
    if measured["probes_failed"]:
        why.append("%d of %d probes of its TCP ports failed"
                   % (measured["probes_failed"], measured["probes_failed"] + measured["probes_ok"]))
    if not measured["probes_ok"]:
        why.append("no probe of its TCP ports answered")
    peak, limit = measured["peak_connections"], worker_connections * max_share // 100
    if peak is None:
        why.append("its workers' connections could not be read")
    elif peak > limit:
        why.append("busiest worker at %d connections, over %d %% of worker_connections (%d)"
                   % (peak, max_share, worker_connections))
    return (FAILED if why else PROVED), why


def connlimit_plan(limit, extra, hold_s, timeout):
    """limit + extra idle connections from one address toward one port, each
    connect bounded by `timeout`, held `hold_s`, then all closed."""
    _between("the extra connections", extra, 1, CONNLIMIT_MAX_TOTAL)
    _between("the limit", limit, 1, CONNLIMIT_MAX_TOTAL - extra)
    _between("the hold time", hold_s, 0, CONNLIMIT_MAX_HOLD_S)
    _between("the connect timeout", timeout, 0.1, MAX_TIMEOUT_S)
    return {"connections": limit + extra, "limit": limit, "extra": extra, "hold_s": hold_s, "timeout_s": timeout,
            "at_least": connlimit_floor(limit), "bound_s": round(timeout + hold_s + timeout + 5, 1)}


def connlimit_floor(limit):
    """The fewest established connections that still show `limit` is the limit in force: other connections of
    this address (its SSH session, a monitor) may hold a few slots - max(5, limit / 10) of them. Fewer means a
    lower limit holds (another rule stacked under ours)."""
    return max(0, limit - max(5, limit // 10))


def connlimit_verdict(plan, counts):
    """(status, reasons) of one port: about `limit` connections stay
    established - at most `limit`, at least plan["at_least"] - and at least
    `extra` are reset, none left unanswered."""
    why = []
    est, reset = counts["established"], counts["reset"]
    if est > plan["limit"]:
        why.append("%d established, %d reset: more than the limit of %d stayed open" % (est, reset, plan["limit"]))
    elif est < plan.get("at_least", connlimit_floor(plan["limit"])):
        why.append("%d established, %d reset: fewer than %d, so a lower limit than %d holds on this port (another "
                   "rule limits it too)" % (est, reset, plan.get("at_least", connlimit_floor(plan["limit"])),
                                            plan["limit"]))
    if reset < plan["extra"]:
        why.append("%d reset of the %d over the limit" % (reset, plan["extra"]))
    if counts["timeout"]:
        why.append("%d connections unanswered in %s s (dropped, not reset)" % (counts["timeout"], plan["timeout_s"]))
    if counts["other"]:
        why.append("%d failed otherwise: %s" % (counts["other"], ", ".join(sorted(counts.get("errors", [])))))
    return (FAILED if why else PROVED), why


def bound_plan(total, rate, burst, limit, extra, sources, hold_s, timeout):
    """The many-source check of the VPS's bound on all sources together (issue 63): the bound a burst of new
    connections meets first - the rate bound's bucket (`burst`, when `rate` is on) or the total (`total`) - plus
    `extra`, opened at once from `sources` (addresses of the host the check runs on) in turn, each source's share
    kept under the per-address `limit` (so that limit never answers), held `hold_s`, then all closed.
    With the rate bound on, `refill_s`: how long its bucket takes to fill again from empty (burst / rate, rounded up,
    plus a second) - the per-address check just before it on the same port emptied it.
    Refused (PlanError) when no bound is on, too few sources are given to stay under the per-address limit, or the
    bucket refills slower than BUCKET_MAX_REFILL_S."""
    if not total and not rate:
        raise PlanError("neither a total nor a rate bound is on (vps_connlimit_total, vps_connlimit_rate): nothing "
                        "bounds all sources together")
    bound, which = min((b, w) for b, w in ((total, "total"), (burst if rate else 0, "rate bound's bucket")) if b)
    _between("the extra connections", extra, 1, CONNLIMIT_MAX_TOTAL)
    _between("the bound", bound, 1, CONNLIMIT_MAX_TOTAL - extra)
    _between("the hold time", hold_s, 0, CONNLIMIT_MAX_HOLD_S)
    _between("the connect timeout", timeout, 0.1, MAX_TIMEOUT_S)
    refill = int(math.ceil(burst / float(rate))) + 1 if rate else 0
    if refill > BUCKET_MAX_REFILL_S:
        raise PlanError("the rate bound's bucket takes %d s to fill again (burst %d / rate %d a second), longer than "
                        "the check waits for it (%d s)" % (refill, burst, rate, BUCKET_MAX_REFILL_S))
    connections = bound + extra
    each = max(1, limit - max(5, limit // 10))  # a share well under the per-address limit, as connlimit_floor
    needed = int(math.ceil(connections / float(each)))
    if len(sources) < needed:
        raise PlanError("%d connections at once under the per-address limit of %d need %d source addresses of this "
                        "host; %d given (vps_connlimit_prove_sources)" % (connections, limit, needed, len(sources)))
    return {"connections": connections, "bound": bound, "which": which, "extra": extra, "sources": len(sources),
            "per_source": int(math.ceil(connections / float(len(sources)))), "hold_s": hold_s, "timeout_s": timeout,
            "at_least": bound - max(5, bound // 10), "refill_s": refill,
            "bound_s": round(refill + timeout + hold_s + 5, 1)}


def bound_verdict(plan, counts):
    """(status, reasons): about `bound` connections from all the sources together stay established - at most the
    bound, at least plan["at_least"] (other clients' connections hold a few of it) - at least `extra` are reset,
    none unanswered."""
    why = []
    est, reset = counts["established"], counts["reset"]
    if est > plan["bound"]:
        why.append("%d established, %d reset: more than the %s of %d stayed open"
                   % (est, reset, plan["which"], plan["bound"]))
    elif est < plan["at_least"]:
        why.append("%d established, %d reset: fewer than %d, so a lower bound than the %s of %d holds (another rule, "
                   "or the bucket not full: new connections in the last seconds)"
                   % (est, reset, plan["at_least"], plan["which"], plan["bound"]))
    if reset < plan["extra"]:
        why.append("%d reset of the %d over the bound" % (reset, plan["extra"]))
    if counts["timeout"]:
        why.append("%d connections unanswered in %s s (dropped, not reset)" % (counts["timeout"], plan["timeout_s"]))
    if counts["other"]:
        why.append("%d failed otherwise: %s" % (counts["other"], ", ".join(sorted(counts.get("errors", [])))))
    return (FAILED if why else PROVED), why


def inflight_plan(amount, extra, timeout):
    """amount + extra slow requests at once through a temporary route; each
    bounded by `timeout`, and so is the wait for Traefik to serve the route.
    The bound: that wait, the requests, and 15 s to add and remove the route."""
    _between("the extra requests", extra, 1, INFLIGHT_MAX_TOTAL)
    _between("the amount", amount, 1, INFLIGHT_MAX_TOTAL - extra)
    _between("the request timeout", timeout, 1, INFLIGHT_MAX_TIMEOUT_S)
    return {"requests": amount + extra, "amount": amount, "extra": extra, "timeout_s": timeout,
            "bound_s": 2 * timeout + 5 + 15}


def inflight_verdict(plan, answers):
    """(status, reasons): at most `amount` answered 200, at least `extra`
    answered 429, nothing else (answers: {status or error: count})."""
    ok, limited = answers.get("200", 0), answers.get("429", 0)
    other = dict((k, n) for k, n in answers.items() if k not in ("200", "429"))
    why = []
    if ok > plan["amount"]:
        why.append("%d answered 200: more than the amount of %d were in flight at once" % (ok, plan["amount"]))
    if limited < plan["extra"]:
        why.append("%d answered 429 of the %d over the amount" % (limited, plan["extra"]))
    if other:
        why.append("answered otherwise: %s" % ", ".join("%d %s" % (n, k) for k, n in sorted(other.items())))
    return (FAILED if why else PROVED), why


def unreachable_reason(first):
    """Why one first connection shows the port cannot be checked from here
    (its outcome from prove_net.hold), or None when it was established."""
    if first == "established":
        return None
    return {"reset": "refused (nothing listens, or a firewall rejects this address)",
            "timeout": "no answer (a firewall drops this address, or no route)"}.get(first, first)


def row(host, check, target, expected, measured, status, reasons=()):
    """One line of the prove table (and the JSON report)."""
    return {"host": host, "check": check, "target": target, "expected": expected, "measured": measured,
            "status": status, "reasons": list(reasons)}


def table(rows):
    """The rows as text lines, widths fitted, reasons under their row."""
    head = ("host", "check", "target", "expected", "measured", "status")
    cells = [head] + [tuple(str(r[k]) for k in head) for r in rows]
    width = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = []
    for n, c in enumerate(cells):
        lines.append("  ".join(c[i].ljust(width[i]) for i in range(len(head))).rstrip())
        if n:
            lines.extend("    - %s" % why for why in rows[n - 1]["reasons"])
    return lines


def summary(rows):
    """{status: count} and whether the run is good: nothing failed or refused,
    and something proved (or, in check mode, planned). Skipped checks are
    counted, and alone prove nothing."""
    counts = dict((s, sum(1 for r in rows if r["status"] == s)) for s in STATUSES)
    return {"counts": counts,
            "ok": not counts[FAILED] and not counts[REFUSED] and (counts[PROVED] + counts[PLANNED]) > 0}
