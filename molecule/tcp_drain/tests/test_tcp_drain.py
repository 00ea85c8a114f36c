"""Verify the drain sysctls: live, persisted, and per namespace."""
import os
import subprocess
import sys

import pytest
import testinfra

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "lab"))
import adhoc  # noqa: E402

HOST = testinfra.get_host("docker://drain-host")
APP = testinfra.get_host("docker://drain-app")
DROPIN = "/etc/sysctl.d/60-homelab-edge-drain.conf"
WANT = {"net.ipv4.tcp_fin_timeout": 15, "net.ipv4.tcp_abort_on_overflow": 1,
        "net.netfilter.nf_conntrack_tcp_timeout_time_wait": 30}


def live(host, key):
    return int(host.check_output("cat /proc/sys/%s" % key.replace(".", "/")))


def test_live_values_and_dropin_on_the_host():
    for key, value in WANT.items():
        assert live(HOST, key) == value
    text = HOST.file(DROPIN).content_string
    for key, value in WANT.items():
        assert "%s = %d" % (key, value) in text
    assert HOST.file(DROPIN).mode == 0o644


def test_values_hold_after_sysctl_system():
    HOST.check_output("sysctl --system")
    for key, value in WANT.items():
        assert live(HOST, key) == value


def test_values_return_after_restart_from_the_dropin():
    subprocess.run(["docker", "restart", "-t", "1", "drain-host"], check=True, capture_output=True)
    # a restarted container has a new network namespace: kernel defaults again
    assert live(HOST, "net.ipv4.tcp_fin_timeout") == 60
    HOST.check_output("sysctl --system")  # what boot does
    for key, value in WANT.items():
        assert live(HOST, key) == value


def test_container_on_a_bridge_network_has_its_own_values():
    assert live(APP, "net.ipv4.tcp_fin_timeout") == 15
    assert live(APP, "net.ipv4.tcp_abort_on_overflow") == 1
    # and its /proc/sys is read-only from inside: only the host could set them
    assert APP.run("sysctl -w net.ipv4.tcp_fin_timeout=20").rc != 0


def run_module(target, args):
    return adhoc.run_module("netns_sysctl", args, target=target, connection="community.docker.docker")


def test_read_only_proc_sys_fails_per_key_or_is_skipped():
    res = run_module("drain-app", {"values": {"net.ipv4.tcp_fin_timeout": 30}})
    assert res.get("failed")
    assert "net.ipv4.tcp_fin_timeout" in res["msg"] and "read-only /proc/sys" in res["msg"]
    res = run_module("drain-app", {"values": {"net.ipv4.tcp_fin_timeout": 30}, "unsupported": "skip"})
    assert not res.get("failed") and not res["changed"]
    assert res["keys"]["net.ipv4.tcp_fin_timeout"]["status"] == "read-only"
    assert live(APP, "net.ipv4.tcp_fin_timeout") == 15


@pytest.mark.parametrize("values, words", [
    ({"net.ipv4.tcp_fin_timout": 15}, "unknown key net.ipv4.tcp_fin_timout"),
    ({"net.ipv4.tcp_fin_timeout": "fast"}, "must be an integer"),
    ({"net.ipv4.tcp_abort_on_overflow": 2}, "between 0 and 1"),
])
def test_bad_input_fails_clearly_and_changes_nothing(values, words):
    before = HOST.check_output("sysctl -a 2>/dev/null | grep -E 'tcp_fin_timeout|abort_on_overflow'")
    res = run_module("drain-host", {"values": values})
    assert res.get("failed") and words in res["msg"]
    assert HOST.check_output("sysctl -a 2>/dev/null | grep -E 'tcp_fin_timeout|abort_on_overflow'") == before


def test_check_mode_reports_without_writing():
    res = adhoc.run_module("netns_sysctl", {"values": {"net.ipv4.tcp_fin_timeout": 20}}, target="drain-host",
                           connection="community.docker.docker", check=True)
    assert res["changed"] and res["keys"]["net.ipv4.tcp_fin_timeout"] == {"before": 15, "after": 20, "status": "changed"}
    assert live(HOST, "net.ipv4.tcp_fin_timeout") == 15
