"""host_signals: the restart loops diagnose names, from autoheal's log counts and docker inspect."""
from ansible_collections.homelab.edge.plugins.modules import host_signals

TRAEFIK = {"Name": "/traefik", "Config": {"Healthcheck": {"Test": ["CMD", "traefik", "healthcheck", "--ping"]}},
           "State": {"Health": {"Status": "starting", "Log": [{"ExitCode": 1, "Output": "Bad healthcheck status: 404 Not Found"}]}}}


def test_a_container_restarted_three_times_is_a_loop_with_its_cause_and_two_are_not():
    loops = host_signals.restart_loops({"by_container": {"traefik": 3, "grafana": 2}}, [TRAEFIK])
    assert [(x["name"], x["restarts"]) for x in loops] == [("traefik", 3)]
    assert "TLS entrypoint" in loops[0]["cause"]
    assert host_signals.restart_loops({"by_container": {"gone": 4}}, [])[0]["cause"].startswith("it has no health check")
