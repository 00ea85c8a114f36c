"""The demo's verdict (demo/proof.py): "proved" only when every row of
"before" shows the failure it names and every row of "after" the fix. Each
row is broken in turn, before and after, and the verdict must turn."""
import copy
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "demo"))
import proof  # noqa: E402

WANT_OPEN_FILES = proof.K3D["k3d_serverlb_worker_rlimit_nofile"]
FLOOR = proof.K3D["k3d_serverlb_worker_connections"]


def load(rate, planned, answered, **kw):
    """A DNS load as probes.dns_load reports it (with the rate the demo adds)."""
    return dict({"rate": rate, "planned": planned, "sent": planned, "answered": answered, "send_errors": 0,
                 "failed": planned - answered, "send_s": round(planned / float(rate), 2), "lateness_p50_s": 0.001,
                 "lateness_p99_s": 0.004, "lateness_max_s": 0.02}, **kw)


HUNG = load(1500, 15000, 0)
GOOD = {
    "k3d": {
        "before": {"dns": load(100, 2000, 534), "alerts": 1520,
                   "tcp_during_dns": {"ok": 18, "failed": 54},
                   "hung_dns": {"rate": 1500, "alerts": 900, "tcp": {"ok": 3, "failed": 40}, "dns": HUNG},
                   "worker_connections": 1029, "worker_open_files": [1048576]},
        "after": {"dns": load(300, 9000, 9000), "alerts": 0,
                  "tcp_during_dns": {"ok": 96, "failed": 0},
                  "hung_dns": {"rate": 1500, "alerts": 0, "tcp": {"ok": 40, "failed": 0}, "dns": HUNG},
                  "worker_connections": FLOOR, "worker_open_files": [WANT_OPEN_FILES], "recreated_fixed_s": 0.1}},
    "edge": {
        "before": {"reset_at_vps": 0, "answered_429": 0, "answered_200": 150, "second_client": [200, 200, 200],
                   "client_addresses": 1},
        "after": {"reset_at_vps": proof.FLOOD_CONNECTIONS - proof.VPS_LIMIT, "other_failures": 0,
                  "answered_429": proof.VPS_LIMIT - proof.AMOUNT, "answered_200": proof.AMOUNT,
                  "second_client": [200, 200, 200], "client_addresses": 2}},
    "nas": {
        "before": {"served_again_s": None, "health": "none", "drain": {"net.ipv4.tcp_abort_on_overflow": 0,
                                                                       "net.ipv4.tcp_fin_timeout": 60},
                   "flood_probes_pct": 100.0, "flood_healthy_after_s": 0},
        "after": {"served_again_s": 31.7, "health": "healthy", "drain": dict(proof.DRAIN_WANT),
                  "flood_probes_pct": 100.0, "flood_healthy_after_s": 0}},
}

PLAN = GOOD["k3d"]["after"]["dns"]

# where the opposite phase's value is no break (no failure claimed before), a value that breaks the fix
BROKEN_AFTER = {
    "recreated_fixed_s": None, "second_client": [200, None, 200], "flood_probes_pct": 3.0,
    "flood_healthy_after_s": None, "other_failures": 3,
}
ROWS = [(part, measure, before is not None) for part, measure, label, before, after in proof.CLAIMS]


def test_the_good_results_are_proved():
    assert proof.proved(GOOD)


@pytest.mark.parametrize("part, measure, claimed", ROWS, ids=["%s.%s" % r[:2] for r in ROWS])
def test_a_row_whose_after_looks_like_before_or_broken_is_not_proved(part, measure, claimed):
    bad = copy.deepcopy(GOOD)
    bad[part]["after"][measure] = BROKEN_AFTER[measure] if measure in BROKEN_AFTER else GOOD[part]["before"][measure]
    assert not proof.proved(bad)
    del bad[part]["after"][measure]  # not measured is not proved either
    assert not proof.proved(bad)


@pytest.mark.parametrize("part, measure", [r[:2] for r in ROWS if r[2]], ids=["%s.%s" % r[:2] for r in ROWS if r[2]])
def test_a_before_that_does_not_show_its_failure_is_not_proved(part, measure):
    bad = copy.deepcopy(GOOD)
    bad[part]["before"][measure] = GOOD[part]["after"][measure]
    assert not proof.proved(bad)


@pytest.mark.parametrize("part, measure, value", [
    ("k3d", "tcp_during_dns", {"ok": 0, "failed": 120}),           # HTTPS+API down during the DNS load
    ("k3d", "tcp_during_dns", {"ok": 96, "failed": 5}),             # enough probes, some failed
    ("k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 40, "failed": 5}, "dns": HUNG}),
    ("k3d", "hung_dns", {"rate": 1500, "alerts": 12, "tcp": {"ok": 40, "failed": 0}, "dns": HUNG}),  # no budget
    ("k3d", "worker_connections", 1029),                              # no floor
    ("k3d", "worker_open_files", [1024]),                             # no worker_rlimit_nofile
    ("k3d", "dns", dict(PLAN, answered=8999)),
    ("k3d", "dns", load(300, 0, 0)),                                  # nothing sent proves nothing
    ("nas", "health", "none"), ("nas", "health", "starting"),        # no health check, or never healthy
    ("nas", "drain", {"net.ipv4.tcp_abort_on_overflow": 1, "net.ipv4.tcp_fin_timeout": 60}),  # tcp_drain broken
    ("nas", "flood_probes_pct", 3.0),
    ("edge", "answered_429", 0),
])
def test_the_failures_the_issue_names_are_not_proved(part, measure, value):
    bad = copy.deepcopy(GOOD)
    bad[part]["after"][measure] = value
    assert not proof.proved(bad)


@pytest.mark.parametrize("part, measure, value", [
    ("k3d", "dns", dict(PLAN, sent=4000, answered=4000, failed=0)),                 # 4,000 of a 9,000 plan
    ("k3d", "dns", dict(PLAN, sent=1, answered=1, failed=0)),                       # one query
    ("k3d", "dns", load(300, 1, 1)),                                                # a plan of one: lighter than before
    ("k3d", "dns", dict(PLAN, send_errors=9000)),                                   # every send refused
    ("k3d", "dns", dict(PLAN, lateness_p99_s=0.8)),                                 # a stall, then a burst
    ("k3d", "dns", dict(PLAN, send_s=60.0)),                                        # sending overran its plan
    ("k3d", "dns", {"rate": 300, "sent": 9000, "answered": 9000}),                 # no plan, no errors recorded
    ("k3d", "dns", dict(PLAN, answered=True, sent=True, planned=True)),            # booleans are not counts
    ("k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 1, "failed": 0}, "dns": HUNG}),   # one probe
    ("k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 40, "failed": 0}}),  # DNS counts thrown away
    ("k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 40, "failed": 0},
                         "dns": dict(HUNG, send_errors=15000)}),                    # the generator failed
    ("k3d", "hung_dns", {"rate": 300, "alerts": 0, "tcp": {"ok": 40, "failed": 0},
                         "dns": load(300, 3000, 0)}),                               # a lighter load than before
    ("k3d", "tcp_during_dns", {"ok": 1, "failed": 0}),                              # a prober that stalled
    ("k3d", "alerts", False),                                                       # False == 0 in Python
    ("k3d", "recreated_fixed_s", 600.0),                                            # a re-fix however late
    ("edge", "answered_200", 0),                                                    # nothing answered 200
    ("edge", "other_failures", 37),                                                 # timeouts counted as resets
    ("edge", "reset_at_vps", True),
    ("nas", "served_again_s", 10000.0),                                             # a heal however late
    ("nas", "drain", {"net.ipv4.tcp_abort_on_overflow": True, "net.ipv4.tcp_fin_timeout": 15.0}),
    ("nas", "flood_probes_pct", 250.0),
])
def test_crafted_broken_runs_are_not_proved(part, measure, value):
    """The holes an audit found in the demo check (issue 35): each crafted input prints "not proved"."""
    bad = copy.deepcopy(GOOD)
    bad[part]["after"][measure] = value
    assert not proof.proved(bad)


def test_the_computed_bounds_come_from_the_roles_settings():
    """The heal bound: the lab's health check (retries x (interval + timeout)), autoheal's interval and stop
    timeout, and START_S for Traefik to serve again; a few seconds over it is not proved."""
    assert 0 < proof.HEAL_BOUND_S < 120 and 0 < proof.REFIX_BOUND_S < 30
    bad = copy.deepcopy(GOOD)
    bad["nas"]["after"]["served_again_s"] = proof.HEAL_BOUND_S + 1
    assert not proof.proved(bad)


def test_every_row_is_reported_with_its_verdict():
    rows = proof.verdicts(GOOD)
    assert len(rows) == len(proof.CLAIMS)
    assert all(r["after_ok"] is True and r["before_ok"] in (True, None) and r["pair_ok"] in (True, None) for r in rows)


def test_the_claims_read_the_lab_inventory_and_can_be_seen():
    """Each expected count is positive: the flood exceeds the VPS's limit,
    and what passes the VPS exceeds Traefik's amount (lab-nas sets 50)."""
    assert 0 < proof.AMOUNT < proof.VPS_LIMIT < proof.FLOOD_CONNECTIONS
    assert proof.DRAIN_WANT["net.ipv4.tcp_fin_timeout"] < 60  # below the kernel's default, or the row shows nothing


NO_AUTOHEAL = {"autoheal": "no image: homelab-edge/autoheal:lab not built: ..."}


def without_the_wedge(results):
    """What the demo measures where autoheal cannot run: no wedge after the site (nothing would heal it)."""
    out = copy.deepcopy(results)
    for measure in ("served_again_s", "health"):
        del out["nas"]["after"][measure]
    return out


def test_rows_whose_part_could_not_run_are_not_run_never_proved():
    """A plain clone without autoheal's image (issue 49): its two rows are "not run" with the reason, every other
    row is proved, nothing failed; the strict verdict (every row proved) still says no."""
    results = without_the_wedge(GOOD)
    rows = proof.verdicts(results, NO_AUTOHEAL)
    assert proof.counts(rows) == {"proved": len(proof.CLAIMS) - 2, "not run": 2, "failed": 0}
    assert sorted((r["part"], r["measure"]) for r in rows if r["not_run"]) == sorted(proof.NEEDS)
    assert all(r["not_run"] == NO_AUTOHEAL["autoheal"] for r in rows if proof.outcome(r) == "not run")
    assert not proof.proved(results)


def test_the_same_rows_without_a_reason_fail():
    """Rows missing their measures where the part could run: failed, not "not run"."""
    rows = proof.verdicts(without_the_wedge(GOOD))
    assert proof.counts(rows) == {"proved": len(proof.CLAIMS) - 2, "not run": 0, "failed": 2}
    # a reason for a part no row needs excuses nothing
    assert proof.counts(proof.verdicts(without_the_wedge(GOOD), {"k3d": "no image"}))["failed"] == 2


@pytest.mark.parametrize("part, measure, value", [("k3d", "alerts", 3), ("edge", "answered_429", 0),
                                                   ("nas", "drain", {"net.ipv4.tcp_fin_timeout": 60})])
def test_a_broken_row_beside_rows_not_run_still_fails(part, measure, value):
    results = without_the_wedge(GOOD)
    results[part]["after"][measure] = value
    assert proof.counts(proof.verdicts(results, NO_AUTOHEAL)) == {"proved": len(proof.CLAIMS) - 3, "not run": 2,
                                                                   "failed": 1}


def test_every_row_that_needs_a_part_names_one_the_lab_knows():
    sys.path.insert(0, os.path.join(ROOT, "lab"))
    import upstream_images
    claimed = set((p, m) for p, m, label, b, a in proof.CLAIMS)
    assert set(proof.NEEDS) <= claimed
    assert set(proof.NEEDS.values()) <= set(upstream_images.NEEDED_BY)
