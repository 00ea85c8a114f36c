"""The demo's verdict (demo/proof.py): "proved" only when every row of
"before" shows the failure it names and every row of "after" the fix. Each
row is broken in turn, before and after, and the verdict must turn."""
import copy
import json
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
    send_s = round((planned - 1) / float(rate), 2) if planned else 0.0
    return dict({"rate": rate, "planned": planned, "sent": planned, "answered": answered, "send_errors": 0,
                 "failed": planned - answered, "send_s": send_s, "lateness_p50_s": 0.001,
                 "lateness_p99_s": 0.004, "lateness_max_s": 0.02,
                 # dns_load's wall time: the sending, then the replies (the timeout, where some never come)
                 "seconds": round(send_s + (proof.probes.REPLY_TIMEOUT_S if answered < planned else 0.05), 2)}, **kw)


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

MANY = proof.MANY_SOURCES * proof.MANY_EACH
FLOOD = {"planned": MANY, "started": MANY, "sources": proof.MANY_SOURCES, "valid": True}
GOOD["many"] = {
    "before": {"flood": dict(FLOOD, connected=MANY, refused=0, ok_2xx=MANY - 12, r429=0,
                             sources_connected=proof.MANY_SOURCES)},
    "after": {"flood": dict(FLOOD, connected=proof.VPS_TOTAL + 9, refused=MANY - proof.VPS_TOTAL - 9,
                            ok_2xx=proof.VPS_TOTAL + 9, r429=0, sources_connected=proof.MANY_SOURCES),
              "lan_served": {"sent": 180, "served": 180}, "public_again_s": 1,
              "traefik": {"health": "healthy", "restarted": False}, "way_in": {"ssh_banner": True, "tunnel": True}}}

PLAN = GOOD["k3d"]["after"]["dns"]

# where the opposite phase's value is no break (no failure claimed before), a value that breaks the fix
BROKEN_AFTER = {
    "recreated_fixed_s": None, "second_client": [200, None, 200], "flood_probes_pct": 3.0,
    "flood_healthy_after_s": None, "other_failures": 3,
    "lan_served": {"sent": 180, "served": 179}, "public_again_s": None,
    "traefik": {"health": "healthy", "restarted": True}, "way_in": {"ssh_banner": False, "tunnel": True},
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


# ------------------------------------------------------------ issue 51: inputs that contradict themselves
NAN, INF = float("nan"), float("inf")
AFTER_DNS_S = PLAN["seconds"]


@pytest.mark.parametrize("phase, part, measure, value", [
    # more probes than the prober makes: 2 targets a round, a round every 0.5 s over a 30 s load is 124 at most
    ("after", "k3d", "tcp_during_dns", {"ok": 240, "failed": 0}),
    ("before", "k3d", "tcp_during_dns", {"ok": 18, "failed": 540}),
    ("after", "k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 400, "failed": 0}, "dns": HUNG}),
    # answered + failed is not sent
    ("after", "k3d", "dns", dict(PLAN, failed=9000)),
    ("before", "k3d", "dns", dict(load(100, 2000, 534), failed=0)),
    # 9,000 queries at 300 q/s sent in 0.3 s: the last is due at 30 s
    ("after", "k3d", "dns", dict(PLAN, send_s=0.3, seconds=0.35)),
    # a wall time the load could not have taken: shorter than its sending, longer than dns_load runs
    ("after", "k3d", "dns", dict(PLAN, seconds=10.0)),
    ("after", "k3d", "dns", dict(PLAN, seconds=3600.0)),
    # a hung DNS server that answered every query
    ("after", "k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 40, "failed": 0},
                                  "dns": load(1500, 15000, 15000)}),
    ("before", "k3d", "hung_dns", {"rate": 1500, "alerts": 900, "tcp": {"ok": 3, "failed": 40},
                                   "dns": load(1500, 15000, 15000)}),
    # p99 lateness 4 ms, the worst 25 s
    ("after", "k3d", "dns", dict(PLAN, lateness_max_s=25.0)),
    # NaN, negative or infinite values
    ("after", "k3d", "dns", dict(PLAN, lateness_p99_s=NAN)),
    ("after", "k3d", "dns", dict(PLAN, lateness_p99_s=-1.0)),
    ("after", "k3d", "dns", dict(PLAN, lateness_max_s=INF)),
    ("after", "k3d", "dns", dict(PLAN, lateness_p50_s=-0.001)),
    ("after", "k3d", "dns", dict(PLAN, send_s=NAN)),
    ("after", "k3d", "dns", dict(PLAN, send_s=-0.5)),
    ("before", "k3d", "worker_connections", -1),
    ("before", "k3d", "worker_open_files", [-1]),
    ("before", "nas", "drain", {"net.ipv4.tcp_abort_on_overflow": -1, "net.ipv4.tcp_fin_timeout": NAN}),
    # the generator's own verdict, and the kernel's drops
    ("after", "k3d", "dns", dict(PLAN, valid=False)),
    ("after", "k3d", "dns", dict(PLAN, snd_buf_errors=500)),
    ("after", "k3d", "hung_dns", {"rate": 1500, "alerts": 0, "tcp": {"ok": 40, "failed": 0},
                                  "dns": dict(HUNG, valid=False)}),
    # healed faster than the health check can call Traefik unhealthy
    ("after", "nas", "served_again_s", 0.0),
    ("after", "nas", "served_again_s", proof.HEAL_MIN_S - 0.5),
    # a second client of the wrong type, or more answers than it asked
    ("after", "edge", "second_client", {200: 200}),
    ("after", "edge", "second_client", [200] * 7),
    # more client addresses, or more answers, than the demo's clients and connections make
    ("after", "edge", "client_addresses", 1000),
    ("before", "edge", "answered_200", 1000),
])
def test_inputs_that_contradict_themselves_are_not_proved(phase, part, measure, value):
    """Issue 51's audit: each of these printed "proved"; every count is bounded by what the run could produce,
    every number is finite and not negative, the generator's own verdict applies."""
    bad = copy.deepcopy(GOOD)
    bad[part][phase][measure] = value
    assert not proof.proved(bad)


def test_the_bounds_are_the_demos_own():
    """The prober's interval is probes.Prober's, the clients lab/edge.py's, the least heal time the lab's health
    check's (retries x interval apart)."""
    import probes
    assert proof.PROBE_INTERVAL_S == probes.Prober([]).interval == 0.5
    assert proof.WAN_CLIENTS == 2 == GOOD["edge"]["after"]["client_addresses"]
    assert proof.SECOND_CLIENT_REQUESTS == len(GOOD["edge"]["after"]["second_client"])
    assert 0 < proof.HEAL_MIN_S < GOOD["nas"]["after"]["served_again_s"] <= proof.HEAL_BOUND_S
    # the good results sit inside every bound, at its edge too
    edge = copy.deepcopy(GOOD)
    edge["nas"]["after"]["served_again_s"] = float(proof.HEAL_MIN_S)
    edge["k3d"]["after"]["tcp_during_dns"] = {"ok": 2 * (int(AFTER_DNS_S / 0.5) + 2), "failed": 0}
    assert proof.proved(edge)


# ------------------------------------------------------------ provenance: this checkout, this machine
HERE = {"commit": "a" * 40, "commit_time": 1765000000, "local_changes": False, "machine": "m1", "host": "lab",
        "kernel": "6.1.0-40-amd64", "engine": "29.1.2", "time": 1765100000.0, "time_utc": "..."}


def record(results=GOOD, not_run=None, **prov):
    rows = proof.verdicts(results, not_run or {})
    return {"results": copy.deepcopy(results), "verdicts": rows, "not_run": not_run or {},
            "counts": proof.counts(rows), "provenance": dict(dict(HERE, time=HERE["time"] - 600), **prov)}


def test_a_record_of_this_checkout_and_machine_is_proved():
    assert proof.judge(record(), HERE) == ("proved", [])
    assert proof.judge(record(), dict(HERE, engine=None))[0] == "proved"  # the engine compared only where known


@pytest.mark.parametrize("doc, says", [
    (record(commit="b" * 40), "this checkout is at"),                       # another checkout's result
    (record(machine="m2"), "not this one"),                                 # another machine's
    (record(kernel="5.10.0-30-amd64"), "kernel"),
    (record(engine="20.10.24"), "engine"),
    (record(time=HERE["time"] + 86400), "not a time before now"),           # from the future
    (record(time=HERE["commit_time"] - 86400), "before its commit"),       # older than the code it names
    (record(time=NAN), "not a time before now"),
    (dict(record(), provenance=None), "no provenance"),                    # today's demo.json
    (record(commit=None), "no commit"),
    (dict(record(), counts={"proved": 99, "not run": 0, "failed": 0}), "counts"),  # not its results'
    (record(results=dict(GOOD, k3d=dict(GOOD["k3d"], after=dict(GOOD["k3d"]["after"], alerts=3)))), "k3d alerts"),
    ({"verdicts": [], "counts": {"proved": 18}}, "no results"),
])
def test_a_record_that_is_not_this_runs_is_not_proved(doc, says):
    verdict, why = proof.judge(doc, HERE)
    assert verdict == "not proved" and says in "; ".join(why), why


def test_the_check_prints_not_proved_for_a_record_of_another_checkout(tmp_path, capsys):
    here = proof.provenance()
    if not here["commit"]:
        pytest.skip("not a git checkout (a copy, as tests/mutations.py makes): no commit to compare")
    assert here["machine"] and here["kernel"]
    doc = record(**dict((k, here[k]) for k in ("commit", "machine", "kernel")))
    doc["provenance"]["time"] = max(here["commit_time"] or 0, here["time"] - 60)
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(doc))
    assert proof.main([str(path)]) == 0 and capsys.readouterr().out.strip() == "proved"
    doc["provenance"]["commit"] = "0" * 40
    path.write_text(json.dumps(doc))
    assert proof.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("not proved: ") and "0000000000" in out
    path.write_text(json.dumps(dict(doc, provenance=None, results={"k3d": {"after": {"dns": dict(PLAN, send_s=NAN)}}})))
    assert proof.main([str(path)]) == 1 and capsys.readouterr().out.startswith("not proved")
    assert proof.main([str(tmp_path / "missing.json")]) == 1 and "cannot read" in capsys.readouterr().out


def test_a_record_with_rows_not_run_says_so():
    doc = record(without_the_wedge(GOOD), NO_AUTOHEAL)
    verdict, why = proof.judge(doc, HERE)
    assert verdict == "proved, but not everything ran" and "2 rows not run" in why[0]


# ------------------------------------------------------------ issue 65: two inputs the check still proved
def hung_row(rate, dns=HUNG, alerts=0, tcp=None):
    return {"rate": rate, "alerts": alerts, "tcp": tcp or {"ok": 40, "failed": 0}, "dns": dns}


@pytest.mark.parametrize("phases, part, measure, value", [
    # a hung-DNS row whose rate contradicts the load it records: 15,000 planned, sent in 10 s, is 1,500 q/s
    (("before", "after"), "k3d", "hung_dns", hung_row(1)),
    (("after",), "k3d", "hung_dns", hung_row(1)),
    (("before", "after"), "k3d", "hung_dns", hung_row(3000)),          # the same kind, the other way
    (("before", "after"), "k3d", "hung_dns", hung_row(1400)),          # close, but 15,000 at 1,400 q/s takes 10.7 s
    (("before", "after"), "k3d", "hung_dns", hung_row(1600)),          # inside the overrun bound, not its load's rate
    (("before", "after"), "k3d", "hung_dns", hung_row(None)),          # a row with no rate at all
    # connections nginx may hold beyond what its workers' open-file limit lets them keep open
    (("after",), "k3d", "worker_connections", 10 ** 9),
    (("after",), "k3d", "worker_connections", WANT_OPEN_FILES + 1),
])
def test_inputs_whose_figures_contradict_each_other_are_not_proved(phases, part, measure, value):
    """Issue 65's audit: a rate that does not fit its load's planned count and sending time, and more connections
    than the open-file limit holds, each printed "proved". Both phases changed where the before/after pair would
    otherwise catch it alone."""
    bad = copy.deepcopy(GOOD)
    for phase in phases:
        if measure == "hung_dns" and phase == "before":
            value = dict(value, alerts=900, tcp={"ok": 3, "failed": 40})
        bad[part][phase][measure] = value
    assert not proof.proved(bad)


def test_the_rules_accept_their_edges():
    """What those rules must still prove: the row's rate its load's, worker_connections exactly at the open-file
    limit, and a rate within the generator's own overrun bound."""
    edge = copy.deepcopy(GOOD)
    edge["k3d"]["after"]["worker_connections"] = WANT_OPEN_FILES
    assert proof.proved(edge)
    assert proof.rate_fits(1500, HUNG) and not proof.rate_fits(1, HUNG) and not proof.rate_fits(0, HUNG)
    assert not proof.connections_holdable(FLOOR, {"worker_open_files": []})
    assert not proof.connections_holdable(FLOOR, {"worker_open_files": [FLOOR - 1, WANT_OPEN_FILES]})
