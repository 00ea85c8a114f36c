"""Seed 001's wedge judged (tests/support/wedge.py): "reproduced" only for a run
dark for DARK_BAR_S after the flood with the kernel's CPU above user CPU; a
run with a prober gap, a missing sample or an invalid generator proves
nothing; seconds with no probe are neither dark nor healthy."""
import os
import sys

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import wedge  # noqa: E402

BEHIND, BESIDE = ["site", "auth"], ["ssh"]
T0, FLOOD_END = 1000.0, 40
GOOD_GEN = [{"rate": 100, "valid": True}, {"rate": 200, "valid": True}]


def run(dark_from=40, dark_s=90, seconds=200, kernel=70, user=10, skip_probes=(), skip_samples=(), beside_ok=True):
    """Crafted inputs: every probe answered except the dark stretch; the core busy in the kernel meanwhile."""
    samples, probes = [], []
    for s in range(seconds):
        dark = dark_from <= s < dark_from + dark_s
        if s not in skip_samples:
            core = {"user": user, "system": kernel * 0.4, "softirq": kernel * 0.6, "idle": 100 - user - kernel} \
                if dark else {"user": 5, "system": 2, "softirq": 1, "idle": 92}
            samples.append({"t": T0 + s + 0.5, "cpu_pct": 1.0, "core": core})
        if s in skip_probes:
            continue
        for name in BEHIND:
            probes.append({"t": T0 + s + 0.1, "target": name, "code": None if dark else 200})
        probes.append({"t": T0 + s + 0.1, "target": "ssh", "code": None, "ok": beside_ok})
    return wedge.rows(T0, seconds, samples, probes, [(T0 + 10, [{"s": 0, "started": 100, "failed": 3}])],
                      BEHIND, BESIDE)


def test_dark_for_long_enough_with_the_kernel_busy_is_reproduced():
    v = wedge.verdict(run(), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert v["valid"] and v["reproduced"], v
    assert v["longest_dark_after_flood_s"] == 90 and v["recovered_after_flood_s"] == 90
    assert v["cpu_while_dark"]["kernel"] == 70.0 and v["cpu_while_dark"]["user"] == 10
    assert v["beside_answered_while_dark"] == {"ssh": (90, 90)}


def test_short_darkness_or_user_cpu_above_the_kernel_is_not_reproduced():
    short = wedge.verdict(run(dark_s=59), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert short["valid"] and not short["reproduced"] and short["longest_dark_after_flood_s"] == 59
    busy_user = wedge.verdict(run(kernel=20, user=60), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert busy_user["valid"] and not busy_user["reproduced"] and busy_user["system_above_user_while_dark"] is False
    healthy = wedge.verdict(run(dark_s=0), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert healthy["dark_after_flood_s"] == 0 and healthy["recovered_after_flood_s"] == 0
    assert healthy["system_above_user_while_dark"] is None and not healthy["reproduced"]


def test_darkness_during_the_flood_only_does_not_count():
    v = wedge.verdict(run(dark_from=10, dark_s=30), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert v["dark_after_flood_s"] == 0 and not v["reproduced"]


def test_a_prober_that_stopped_is_no_darkness_and_makes_the_run_invalid():
    """Crafted: the prober dies at the flood's end (no probe lines at all): no second is dark, and the run says why."""
    v = wedge.verdict(run(dark_s=0, skip_probes=range(40, 200)), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert v["dark_after_flood_s"] == 0 and v["recovered_after_flood_s"] is None
    assert not v["valid"] and not v["reproduced"] and "seconds with no probe" in v["invalid_because"]


def test_missing_samples_an_invalid_generator_or_none_at_all_prove_nothing():
    no_cpu = wedge.verdict(run(skip_samples=range(40, 130)), FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert not no_cpu["valid"] and not no_cpu["reproduced"] and "no sample" in no_cpu["invalid_because"]
    bad_gen = wedge.verdict(run(), FLOOD_END, BEHIND, BESIDE,
                            GOOD_GEN + [{"rate": 400, "valid": False, "invalid_because": "p99 lateness 0.2 s"}])
    assert not bad_gen["reproduced"] and "generator invalid at 400: p99 lateness 0.2 s" in bad_gen["invalid_because"]
    assert not wedge.verdict(run(), FLOOD_END, BEHIND, BESIDE, [])["reproduced"]
    assert not wedge.verdict([], FLOOD_END, BEHIND, BESIDE, GOOD_GEN)["valid"]


def test_a_flicker_of_answers_breaks_the_dark_stretch_and_partial_seconds_are_not_dark():
    rows = run(dark_s=100)
    for r in rows[70:71]:
        r["site_ok"] = 1  # one probe answered in the middle of the darkness: partial, which ends the stretch
    v = wedge.verdict(rows, FLOOD_END, BEHIND, BESIDE, GOOD_GEN)
    assert wedge.state(rows[70], BEHIND) == "partial"
    assert v["dark_after_flood_s"] == 99 and v["longest_dark_after_flood_s"] == 69 and v["reproduced"]


def test_the_flood_timeline_lands_on_its_seconds():
    rows = run()
    assert rows[10]["flood_started"] == 100 and rows[10]["flood_failed"] == 3 and "flood_started" not in rows[11]


def test_the_tables_figures_read_the_seconds_they_name():
    rows = [{"t": t, "conntrack": 1000 - 100 * t if t != 3 else None} for t in range(10)]
    assert wedge.mean_of(rows, "conntrack", 0, 3) == 900.0 and wedge.mean_of(rows, "conntrack", 3, 4) is None
    assert wedge.value_at(rows, "conntrack", 3) == 600 and wedge.value_at(rows, "conntrack", 10) is None
    assert wedge.below_after(rows, "conntrack", 2, 500) == 4 and wedge.below_after(rows, "conntrack", 2, 0) is None
