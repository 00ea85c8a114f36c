import pytest

from ansible_collections.homelab.edge.plugins.module_utils import autoheal


@pytest.mark.parametrize("test, never_fails", [
    (["CMD", "traefik", "healthcheck", "--ping"], False),
    (["CMD", "true"], True),
    (["CMD-SHELL", "exit 0"], True),
    (["CMD-SHELL", "curl -fs http://localhost/ || true"], True),
    (["CMD-SHELL", "curl -fs http://localhost/ || exit 1"], False),
    (["NONE"], False),
])
def test_health_checks_that_cannot_fail(test, never_fails):
    assert autoheal.cannot_fail(test) is never_fails


def test_problems():
    ok = {"Config": {"Labels": {"autoheal": "true"}, "Healthcheck": {"Test": ["CMD", "traefik", "healthcheck", "--ping"]}}}
    assert autoheal.problems("traefik", ok, "autoheal") == []
    assert autoheal.problems("traefik", None, "autoheal") == ["traefik does not exist"]
    bare = {"Config": {"Labels": {}}}
    assert [p.split(":")[0] for p in autoheal.problems("x", bare, "autoheal")] == [
        "x lacks the label autoheal=true", "x has no health check"]
    assert autoheal.problems("x", bare, "all")[0].startswith("x has no health check")
    lying = {"Config": {"Labels": {"autoheal": "true"}, "Healthcheck": {"Test": ["CMD-SHELL", "true"]}}}
    assert "cannot fail" in autoheal.problems("x", lying, "autoheal")[0]
