"""The ladder's rules (tests/support/ladder.py): a step holds only on every
rule, an invalid generator is no verdict, the ladder rises then bisects and
stops, a limit names what ran out."""
import os
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import ladder  # noqa: E402


def good(**kw):
    step = {"valid": True, "invalid_because": "", "sent": 10000, "answered": 10000, "latency_p99_s": 0.002,
            "alerts": 0, "probes": {"planned": 40, "ok": 40, "failed": 0, "busy": 0}}
    step.update(kw)
    return step


def test_a_step_holds_only_when_every_rule_does():
    assert ladder.holds(good()) == (True, "")
    assert ladder.holds(good(answered=9990))[0] is True  # 99.9 % exactly
    for bad, words in ((good(answered=9989), "answered 9989 of 10000"),
                       (good(latency_p99_s=0.05), "p99 latency 0.05"),
                       (good(latency_p99_s=None), "p99 latency None"),
                       (good(alerts=1), "1 'not enough'"),
                       (good(alerts=None), "None 'not enough'"),
                       (good(probes={"planned": 100, "ok": 98, "failed": 2, "busy": 0}), "probes ok 98 of 100"),
                       (good(probes={"planned": 0, "ok": 0, "failed": 0, "busy": 0}), "probes ok 0 of 0"),
                       (good(sent=0, answered=0), "answered 0 of 0")):
        held, why = ladder.holds(bad)
        assert held is False and words in why, (bad, why)
    assert ladder.holds(good(probes=None))[0] is True  # the DNS server asked directly: nothing to probe


def test_an_invalid_generator_is_no_verdict_and_ends_the_ladder():
    held, why = ladder.holds(good(valid=False, invalid_because="3 send errors"))
    assert held is None and "3 send errors" in why
    assert ladder.next_rate([(250, True), (500, None)], 250) is None


def test_the_ladder_rises_until_a_failure_then_bisects_and_stops():
    tried, seen = [], []
    limit_rate = 3100  # a system that holds up to here

    rate = ladder.next_rate(tried, 250)
    while rate is not None and len(seen) < 20:
        seen.append(rate)
        tried.append((rate, rate <= limit_rate))
        rate = ladder.next_rate(tried, 250)
    assert seen == [250, 500, 1000, 2000, 4000, 3000, 3500, 3250]
    assert ladder.limit(tried) == {"holds_at": 3000, "fails_at": 3250, "open": False}


def test_a_first_step_that_fails_bisects_downwards():
    assert ladder.next_rate([(250, False)], 250) == 125
    assert ladder.next_rate([(250, False), (125, True)], 250) == 187
    assert ladder.limit([(250, False), (125, True), (187, False)]) == {"holds_at": 125, "fails_at": 187,
                                                                      "open": False}


def test_the_ladder_never_offers_more_than_the_generators_ceiling():
    assert ladder.next_rate([(4000, True)], 250, ceiling=5000) == 5000
    assert ladder.next_rate([(4000, True), (5000, True)], 250, ceiling=5000) is None
    assert ladder.limit([(4000, True), (5000, True)]) == {"holds_at": 5000, "fails_at": None, "open": True}


def test_a_held_rate_above_a_failure_is_not_the_limit():
    assert ladder.limit([(1000, True), (2000, False), (1500, False), (1250, True), (1700, True)])["holds_at"] == 1250


def test_what_ran_out():
    cpus = {"load balancer": 1, "DNS server": 1, "generator": 1}
    assert ladder.bound_by({"alerts": 3, "wall_s": 5, "cpu_s": {"load balancer": 5}}, cpus) == "connections"
    assert ladder.bound_by({"alerts": 0, "wall_s": 5, "cpu_s": {"load balancer": 4.6, "DNS server": 0.4}},
                           cpus) == "CPU (load balancer)"
    assert ladder.bound_by({"alerts": 0, "wall_s": 5, "cpu_s": {"load balancer": 4.4, "DNS server": 0.4}},
                           cpus).startswith("neither")
    assert ladder.bound_by({"alerts": 0, "wall_s": 5, "cpu_s": {"DNS server": 4.7}}, cpus) == "CPU (DNS server)"


def test_each_repetition_has_its_own_order_reproducible_from_the_seed():
    configs = ["direct", "stock", "seed's fix", "homelab.edge"]
    a, b = ladder.orders(configs, 3, 1), ladder.orders(configs, 3, 1)
    assert a == b and all(sorted(o) == sorted(configs) for o in a)
    assert len(set(tuple(o) for o in ladder.orders(configs, 6, 7))) > 1


def test_the_slow_responder_answers_late_and_stops_on_sigterm():
    import json
    import signal
    import socket
    import subprocess
    import time
    import probes
    p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "support", "slowdns.py"), "--port", "0",
                          "--delay", "0.3", "--seconds", "20"], stdout=subprocess.PIPE, text=True)
    try:
        ready = p.stdout.readline().split()
        assert ready[0] == "ready"
        port = int(ready[1])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        t0 = time.monotonic()
        s.sendto(probes.dns_query_packet(0x1234), ("127.0.0.1", port))
        reply = s.recv(512)
        took = time.monotonic() - t0
        assert probes.dns_answered(reply, 0x1234) and 0.3 <= took < 1.5, took
    finally:
        p.send_signal(signal.SIGTERM)
        out, dummy = p.communicate(timeout=10)
    assert json.loads(out.strip().splitlines()[-1]) == {"received": 1, "answered": 1}


def test_the_open_loop_prober_keeps_its_schedule_when_nothing_answers():
    import socket
    import time
    import probes
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: refused at once
    pr = probes.OpenLoopProber([("127.0.0.1", dead.getsockname()[1])], interval=0.1, max_rounds=1000)
    pr.start()
    time.sleep(1.05)
    got = pr.stop()
    dead.close()
    assert 9 <= got["planned"] <= 12 and got["ok"] == 0 and got["failed"] == got["planned"], got


# ------------------------------------------------------------ issue 51: every figure, probes planned, shared CPUs
def test_a_step_whose_figures_are_no_figures_does_not_hold():
    """NaN >= 0.05 is False: a NaN p99 held; negative and boolean counts did too."""
    for bad in (good(latency_p99_s=float("nan")), good(latency_p99_s=-0.01), good(latency_p99_s=float("inf")),
                good(answered=float("nan")), good(sent=True, answered=True), good(answered=10001),
                good(alerts=-1), good(alerts=False)):
        assert ladder.holds(bad)[0] is False, bad


def test_probes_are_judged_against_the_probes_planned():
    """A prober starved of CPU ran half its rounds, all answered: not 100 %, 50 % of the plan."""
    held, why = ladder.holds(good(probes={"planned": 80, "ok": 40, "failed": 0, "busy": 0}))
    assert held is False and "probes ok 40 of 80 planned" in why
    held, why = ladder.holds(good(probes={"planned": 40, "ok": 40, "failed": 5, "busy": 0}))
    assert held is False and "over the 40 planned" in why  # more probes back than planned: counted twice
    assert ladder.holds(good(probes={"ok": 40, "failed": 0}))[0] is False  # nothing planned recorded


def test_a_cpu_run_out_by_two_components_together_is_named():
    """Repetition 2's failure: the load balancer and the DNS server on one core, 82 % busy together over the step
    and neither near it alone, read "neither"; with the CPUs each may use as sets, the shared core is named."""
    shared = {"load balancer": {0}, "DNS server": {0}, "generator": {1}}
    step = {"alerts": 0, "wall_s": 5, "cpu_s": {"load balancer": 2.6, "DNS server": 2.1, "generator": 1.0}}
    assert ladder.bound_by(step, shared) == "CPU (load balancer + DNS server together)"
    assert ladder.bound_by(dict(step, cpu_s={"load balancer": 2.0, "DNS server": 2.0, "generator": 4.9}),
                           shared) == "CPU (generator)"
    assert ladder.bound_by(dict(step, cpu_s={"load balancer": 2.0, "DNS server": 2.0}), shared).startswith("neither")
    # a component on one of the shared CPUs runs on the pair's too
    pair = {"load balancer": {0, 1}, "DNS server": {0, 1}, "TLS endpoints": {1}}
    three = {"alerts": 0, "wall_s": 5, "cpu_s": {"load balancer": 4.0, "DNS server": 3.0, "TLS endpoints": 2.5}}
    assert ladder.bound_by(three, pair) == "CPU (load balancer + DNS server + TLS endpoints together)"
    # counts alone say nothing of sharing: as before
    assert ladder.bound_by(step, {"load balancer": 1, "DNS server": 1, "generator": 1}).startswith("neither")


def test_a_quota_is_a_share_of_one_core_for_bound_by():
    step = good(wall_s=20.0, cpu_s={"load balancer": 1.85, "DNS server": 0.4, "generator": 1.0})
    cpus = {"load balancer": 0.1, "DNS server": {0}, "generator": {1}}
    assert ladder.bound_by(step, cpus) == "CPU (load balancer)"  # 1.85 s of the 2 s its 10 % quota gives
    step["cpu_s"]["load balancer"] = 1.7
    assert ladder.bound_by(step, cpus).startswith("neither")


def test_spread_takes_the_middle_not_the_favourable():
    assert ladder.spread([900, 1100]) == {"median": 1000.0, "min": 900, "max": 1100, "n": 2}
    assert ladder.spread([3, None, float("nan"), 1, 2])["median"] == 2
    assert ladder.spread([]) == {"median": None, "min": None, "max": None, "n": 0}


def test_ratios_pair_repetitions_and_leave_out_what_is_missing():
    r = ladder.ratios([900, 1000, None], [1000, 1000, 800])
    assert r["each"] == [0.9, 1.0] and r["n"] == 2 and r["median"] == 0.95
    assert ladder.ratios([900], [0])["n"] == 0


def test_service_demand_is_the_slope_and_needs_two_counts():
    d = ladder.service_demand([(1000, 0.2 + 1000 * 95e-6), (4000, 0.2 + 4000 * 95e-6), (8000, 0.2 + 8000 * 95e-6)])
    assert abs(d["per_query_s"] - 95e-6) < 1e-9 and abs(d["fixed_s"] - 0.2) < 1e-9 and d["points"] == 3
    assert ladder.service_demand([(1000, 0.1), (1000, 0.2)]) is None
    assert ladder.service_demand([(1000, None), (2000, 0.2)]) is None


def test_a_computed_capacity_agrees_only_near_the_ladder():
    assert ladder.capacity_agrees(0.1, 95e-6, 1000, 1125) == {"computed_qps": 1053, "agrees": True}
    assert ladder.capacity_agrees(0.1, 50e-6, 1000, 1125)["agrees"] is False  # 2,000 q/s computed
    assert ladder.capacity_agrees(0.1, 200e-6, 1000, 1125)["agrees"] is False  # 500
    assert ladder.capacity_agrees(0.1, None, 1000, 1125) == {"computed_qps": None, "agrees": False}
    # 2 % of a core goes to the probes whatever the rate: 8 % left for the queries
    assert ladder.capacity_agrees(0.1, 80e-6, 1000, 1125, fixed_cores=0.02) == {"computed_qps": 1000, "agrees": True}
    assert ladder.capacity_agrees(0.1, 80e-6, 1000, 1125)["computed_qps"] == 1250


def test_headroom_is_available_over_used():
    assert ladder.headroom(1.0, 2.0, 20.0) == 10.0
    assert ladder.headroom(0.9, 0.0, 20.0) is None
    assert ladder.headroom(1.0, float("nan"), 20.0) is None


def test_alternating_orders_never_run_one_twice_in_a_row():
    orders = ladder.alternating(["seed", "edge"], ["stock"], 3)
    assert orders == [["seed", "edge", "stock"], ["edge", "seed", "stock"], ["seed", "edge", "stock"]]
    flat = [n for o in orders for n in o]
    assert all(a != b for a, b in zip(flat, flat[1:]))
    assert ladder.alternating(["seed", "edge"], [], 3) == [["seed", "edge"], ["edge", "seed"], ["seed", "edge"]]


def test_only_a_step_held_below_saturation_is_a_demand_point():
    assert ladder.unsaturated(good(holds=True, throttling={"nr_periods": 1000, "nr_throttled": 49}))
    assert not ladder.unsaturated(good(holds=True, throttling={"nr_periods": 1000, "nr_throttled": 50}))
    assert not ladder.unsaturated(good(holds=False, throttling={"nr_periods": 1000, "nr_throttled": 0}))
    assert not ladder.unsaturated(good(holds=True, throttling=None))
    assert not ladder.unsaturated(good(holds=True, throttling={"nr_periods": 0, "nr_throttled": 0}))


# ------------------------------------------------------------ issue 65: CPU per query with its interval
def test_the_mean_and_its_95_percent_interval():
    ci = ladder.mean_ci([1, 2, 3, 4, 5])
    # sd 1.581, standard error 0.707, t(4) = 2.776: half-width 1.963
    assert ci["mean"] == 3 and abs(ci["half"] - 1.963) < 1e-3 and ci["n"] == 5
    assert abs(ci["low"] - 1.037) < 1e-3 and abs(ci["high"] - 4.963) < 1e-3
    assert ladder.mean_ci([7.0])["half"] is None and ladder.mean_ci([])["mean"] is None
    assert ladder.mean_ci([1, float("nan"), None, True, 3])["n"] == 2  # non-figures left out, booleans too
    assert ladder.t95(1) == 12.706 and ladder.t95(40) == 1.96 and ladder.t95(0) is None
    assert ladder.mean_ci([4, 4, 4])["half"] == 0


def test_a_paired_difference_takes_out_what_drifts_between_repetitions():
    """Two configurations that drift together (each repetition 10 % slower than the one before) differ by 5 % in
    every repetition: the paired interval is tight around 5 %, where the unpaired means' intervals overlap."""
    seed = dict((r, 50.0 * 1.1 ** r) for r in range(1, 6))
    edge = dict((r, v * 1.05) for r, v in seed.items())
    p = ladder.paired(edge, seed)
    assert p["repetitions"] == [1, 2, 3, 4, 5]
    assert abs(p["relative"]["mean"] - 0.05) < 1e-9 and p["relative"]["half"] < 1e-9
    assert ladder.mean_ci(edge.values())["low"] < ladder.mean_ci(seed.values())["high"]  # unpaired: no difference
    assert ladder.within(p["relative"], 0.05 + 1e-9) and not ladder.within(p["relative"], 0.04)
    # a repetition missing from one side is left out of both
    assert ladder.paired({1: 2.0, 2: 3.0}, {2: 3.0, 3: 1.0})["repetitions"] == [2]
    assert ladder.within(ladder.paired({1: 2.0}, {1: 2.0})["relative"], 0.05) is None  # one pair: no interval


def test_the_slope_and_its_interval():
    s = ladder.slope_ci([(1000, 0.05), (2000, 0.1), (4000, 0.2)])
    assert abs(s["slope"] - 50e-6) < 1e-12 and abs(s["intercept"]) < 1e-9 and s["high"] - s["low"] < 1e-12
    noisy = ladder.slope_ci([(1000, 0.05), (1000, 0.06), (2000, 0.1), (2000, 0.11), (4000, 0.2), (4000, 0.19)])
    assert noisy["low"] < noisy["slope"] < noisy["high"] and noisy["n"] == 6
    assert ladder.slope_ci([(1, 1), (2, 2)]) is None and ladder.slope_ci([(1, 1), (1, 2), (1, 3)]) is None


def test_abab_reverses_every_other_repetition():
    assert ladder.abab("ABCD", 3) == [list("ABCD"), list("DCBA"), list("ABCD")]
    # every configuration's mean position is the same over an even count
    orders = ladder.abab("ABCD", 4)
    assert len(set(sum(o.index(c) for o in orders) for c in "ABCD")) == 1


def cpu_step(config="seed's fix", rep=1, rate=2000, lb=6.0, answered=120000, **kw):
    return dict({"config": config, "repetition": rep, "rate": rate, "lb_cpu_s": lb, "answered": answered,
                 "sent": answered, "wall_s": 60.0, "valid": True, "invalid_because": "", "alerts": 0,
                 "latency_p99_s": 0.002, "disturbance_share": 0.004, "other_cpu_busy_share": 0.4}, **kw)


@pytest.mark.parametrize("change, says", [
    ({"valid": False, "invalid_because": "99th percentile lateness"}, "generator invalid"),
    ({"disturbance_share": 0.05}, "beyond its own cgroup"),
    ({"other_cpu_busy_share": 0.95}, "generator's CPU busy"),
    ({"lb_cpu_s": None}, "lb_cpu_s"),
    ({"lb_cpu_s": float("nan")}, "lb_cpu_s"),
    ({"disturbance_share": None}, "disturbance_share"),
    ({"answered": 0}, "nothing answered"),
])
def test_a_cpu_step_counts_only_when_the_generator_and_the_cpu_were_its_own(change, says):
    assert ladder.cpu_step_problems(cpu_step()) == []
    why = ladder.cpu_step_problems(cpu_step(**change))
    assert why and says in "; ".join(why)


def test_below_saturation_and_the_cost_of_a_query():
    assert ladder.below_saturation(cpu_step()) and ladder.us_per_query(cpu_step()) == 50.0
    assert not ladder.below_saturation(cpu_step(alerts=3))  # out of connections
    assert not ladder.below_saturation(cpu_step(answered=100000, sent=120000))
    assert not ladder.below_saturation(cpu_step(latency_p99_s=0.2))
    assert ladder.us_per_query(cpu_step(answered=0)) is None


def test_the_cpu_summary_pairs_configurations_by_repetition_and_leaves_invalid_steps_out():
    steps = []
    for rep in range(1, 6):
        for rate in (2000, 4000):
            drift = 1 + 0.02 * rep
            steps.append(cpu_step("seed's fix", rep, rate, lb=50e-6 * drift * rate * 60, answered=rate * 60))
            steps.append(cpu_step("homelab.edge", rep, rate, lb=52e-6 * drift * rate * 60, answered=rate * 60))
    # an invalid step with an absurd figure must change nothing
    steps.append(cpu_step("homelab.edge", 1, 2000, lb=600.0, valid=False, invalid_because="late"))
    s = ladder.cpu_summary(steps, ["seed's fix", "homelab.edge"], [2000, 4000], [("homelab.edge", "seed's fix")])
    edge = s["configs"]["homelab.edge"]
    assert edge["steps"] == 10 and edge["per_rate"]["2000"]["n"] == 5 and edge["per_rate"]["2000"]["below_saturation"]
    assert abs(edge["marginal"]["slope"] * 1e6 - 52 * 1.06) < 2  # the drift's mean is 1.06
    pair = s["pairs"]["homelab.edge vs seed's fix"]
    assert abs(pair["per_rate"]["2000"]["relative"]["mean"] - 0.04) < 1e-9
    assert abs(pair["relative_over_rates"]["mean"] - 0.04) < 1e-9 and pair["relative_over_rates"]["n"] == 5
    assert ladder.within(pair["relative_over_rates"], 0.05)
