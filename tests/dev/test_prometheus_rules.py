"""Every alert the roles ship has promtool unit tests both ways (tests/prometheus:
firing on its fault and quiet where there is none); `tests/run.sh rules` runs them."""
import glob
import os
import sys

import yaml

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import prometheus_rules  # noqa: E402


def alerts():
    found = {}
    for role in prometheus_rules.roles():
        for group in yaml.safe_load(prometheus_rules.render(role))["groups"]:
            for rule in group["rules"]:
                found[rule["alert"]] = role
    return found


def checks():
    firing, quiet = set(), set()
    for path in glob.glob(os.path.join(ROOT, "tests", "prometheus", "*.test.yml")):
        with open(path) as f:
            for test in yaml.safe_load(f)["tests"]:
                for case in test.get("alert_rule_test", []):
                    (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    return firing, quiet


def test_every_alert_is_tested_firing_and_quiet():
    firing, quiet = checks()
    shipped = alerts()
    assert len(shipped) >= 12
    assert sorted(a for a in shipped if a not in firing) == []
    assert sorted(a for a in shipped if a not in quiet) == []


def test_every_threshold_is_an_option_of_its_role():
    """The templates take every number from the role's defaults: rendered with
    other values, no alert's expression or duration stays the same."""
    for role in prometheus_rules.roles():
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as f:
            defaults = yaml.safe_load(f)
        # TraefikRestartLoop takes its numbers from the restart-loop guard's own options (one home for them)
        knobs = dict((k, v) for k, v in defaults.items()
                     if "_alert_" in k or k in ("autoheal_restart_limit", "autoheal_restart_window"))
        assert knobs, role
        changed = dict((k, "7m" if isinstance(v, str) else
                        [dict(b, long="7h", short="7m", factor=7, **{"for": "7m"}) for b in v] if isinstance(v, list) else 7)
                       for k, v in knobs.items())
        base = yaml.safe_load(prometheus_rules.render(role))["groups"][0]["rules"]
        other = yaml.safe_load(prometheus_rules.render(role, changed))["groups"][0]["rules"]
        for a, b in zip(base, other):
            assert (a["expr"], a.get("for")) != (b["expr"], b.get("for")), (role, a["alert"])


def test_the_absent_alert_of_container_counters_is_written_only_where_they_are():
    """ContainerSocketMetricsAbsent would fire for ever on a host whose play writes no container counters (none
    asked for, or no systemd to run the writer's timer)."""
    def names(**values):
        return [r["alert"] for r in yaml.safe_load(prometheus_rules.render("tcp_drain", values))["groups"][0]["rules"]]
    assert "ContainerSocketMetricsAbsent" in names()
    assert "ContainerSocketMetricsAbsent" not in names(tcp_drain_containers=[])
    assert "ContainerSocketMetricsAbsent" not in names(tcp_drain_metrics_dir="")
    assert "ContainerSocketMetricsAbsent" not in names(ansible_facts={"service_mgr": "sysvinit"})
    assert "ContainerSocketMetricsAbsent" not in names(ansible_facts={})
    assert "ContainerSocketMetricsStale" in names(tcp_drain_containers=[])


def test_traefik_s_scrape_and_path_alerts_are_written_only_where_they_can_speak():
    """TraefikNotScraped (absent(up)) would fire for ever on a healthy homelab whose Traefik metrics are off;
    TraefikEntrypointSilent needs the health check's own request on the entrypoint."""
    def names(**values):
        return [r["alert"] for r in yaml.safe_load(prometheus_rules.render("traefik_inflight", values))["groups"][0]
                ["rules"]]
    assert "TraefikNotScraped" in names() and "TraefikEntrypointSilent" in names()
    assert "TraefikNotScraped" not in names(traefik_inflight_metrics=False)
    assert "TraefikEntrypointSilent" not in names(traefik_inflight_healthcheck_through="ping")
    assert "TraefikEntrypointSilent" not in names(traefik_inflight_healthcheck={})
