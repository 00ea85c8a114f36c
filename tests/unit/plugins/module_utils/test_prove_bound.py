"""homelab.edge.prove's many-source check of the VPS's bound on all sources together (module_utils/prove/checks.py):
which bound a burst meets, the sources it needs under the per-address limit, and the verdict."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.prove import checks

SOURCES = ["10.201.0.%d" % i for i in range(1, 11)]


def test_the_rate_bounds_bucket_comes_first_with_the_defaults():
    plan = checks.bound_plan(400, 4, 100, 100, 10, SOURCES, 2, 3)
    assert (plan["bound"], plan["which"], plan["connections"], plan["at_least"]) == (100, "rate bound's bucket", 110, 90)
    assert plan["per_source"] == 11 and plan["sources"] == 10


def test_the_total_when_the_rate_bound_is_off():
    plan = checks.bound_plan(400, 0, 100, 100, 10, SOURCES, 2, 3)
    assert (plan["bound"], plan["which"], plan["connections"]) == (400, "total", 410)


@pytest.mark.parametrize("args, words", [
    ((0, 0, 100, 100, 10, SOURCES, 2, 3), "neither a total nor a rate bound"),
    ((400, 0, 100, 100, 10, SOURCES[:4], 2, 3), "need 5 source addresses of this host; 4 given"),
    ((2500, 0, 100, 100, 10, SOURCES, 2, 3), "the bound is 2500"),
    ((400, 0, 100, 100, 10, SOURCES, 60, 3), "the hold time"),
])
def test_refusals(args, words):
    with pytest.raises(checks.PlanError, match=words):
        checks.bound_plan(*args)


def counts(established, reset, timeout=0):
    return {"established": established, "reset": reset, "timeout": timeout, "other": 0, "errors": []}


def test_the_verdict():
    plan = checks.bound_plan(400, 0, 100, 100, 10, SOURCES, 2, 3)
    assert checks.bound_verdict(plan, counts(400, 10)) == (checks.PROVED, [])
    assert checks.bound_verdict(plan, counts(380, 30)) == (checks.PROVED, [])      # others hold a few
    status, why = checks.bound_verdict(plan, counts(410, 0))
    assert status == checks.FAILED and "more than the total of 400" in why[0]   # nothing bounds them together
    status, why = checks.bound_verdict(plan, counts(100, 310))
    assert status == checks.FAILED and "fewer than 360" in why[0]
    status, why = checks.bound_verdict(plan, counts(400, 0, 10))
    assert status == checks.FAILED and "unanswered" in why[-1]


def test_the_many_source_check_waits_for_the_bucket_to_fill_again():
    assert checks.bound_plan(400, 4, 100, 100, 10, SOURCES, 2, 3)["refill_s"] == 26   # 100 / 4, plus a second
    assert checks.bound_plan(400, 0, 100, 100, 10, SOURCES, 2, 3)["refill_s"] == 0
    with pytest.raises(checks.PlanError, match="takes 201 s to fill again"):
        checks.bound_plan(400, 1, 200, 100, 10, SOURCES, 2, 3)
