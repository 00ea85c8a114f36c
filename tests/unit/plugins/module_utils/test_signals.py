from ansible_collections.homelab.edge.plugins.module_utils import signals

SS = """0 0 192.168.176.2:80 192.168.176.3:40001
0 0 192.168.176.2:80 192.168.176.3:40002
0 0 192.168.176.2:80 192.168.176.9:40003
0 0 [::ffff:192.168.176.2]:443 [::ffff:192.168.176.3]:40004
0 0 192.168.176.2:22 192.168.176.1:5000
"""
IPTABLES = """Chain ufw-before-input (1 references)
    pkts      bytes target     prot opt in     out     source               destination
     900    54000 REJECT     6    --  *      *       0.0.0.0/0            0.0.0.0/0            tcp dpt:80 ctstate NEW #conn src/32 > 100 reject-with tcp-reset
       7      420 REJECT     tcp  --  *      *       0.0.0.0/0            0.0.0.0/0       ctorigdstport 443 ctstate NEW #conn src/32 > 100 reject-with tcp-reset
     123     4000 ACCEPT     6    --  *      *       0.0.0.0/0            0.0.0.0/0            tcp dpt:22
"""


def test_top_talkers_per_local_port():
    assert signals.top_talkers(SS, [80, 443]) == {80: [("192.168.176.3", 2), ("192.168.176.9", 1)],
                                                  443: [("192.168.176.3", 1)]}
    assert signals.top_talkers(SS, [8080]) == {}


def test_connlimit_counters_of_iptables_nft_and_legacy_output():
    assert signals.connlimit_counters(IPTABLES) == {80: 900, 443: 7}


def test_cpu_and_sockets():
    before = signals.cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\n")
    after = signals.cpu_times("cpu  150 0 250 900 50 0 50 0 0 0\n")
    assert signals.cpu_pct(before, after) == {"user": 12.5, "system": 62.5}
    assert signals.socket_states("ESTAB 0 0 a b\nTIME-WAIT 0 0 a b\nESTAB 0 0 a b\n") == {"ESTAB": 2, "TIME-WAIT": 1}


def test_unhealthy_since_the_first_failure_after_the_last_success():
    doc = {"Name": "/traefik", "State": {"Health": {"Status": "unhealthy", "FailingStreak": 3, "Log": [
        {"Start": "2026-12-01T08:00:00.1Z", "ExitCode": 0, "Output": "OK"},
        {"Start": "2026-12-01T08:00:10.1Z", "ExitCode": 1, "Output": "timeout\n"},
        {"Start": "2026-12-01T08:00:20.1Z", "ExitCode": 1, "Output": "timeout\n"}]}}}
    healthy = {"Name": "/other", "State": {"Health": {"Status": "healthy"}}}
    now = 1796112030.0  # 2026-12-01T08:00:30Z
    assert signals.unhealthy([doc, healthy, {"Name": "/nohealth", "State": {}}], now) == [
        {"name": "traefik", "since_s": 20.0, "failing_streak": 3, "last_output": "timeout"}]


def test_autoheal_log():
    log = ("01-12-2026 08:00:01 Container /traefik (abc) found to be unhealthy - Restarting container now with 10s timeout\n"
           "01-12-2026 08:00:02 Restarting container abc failed\n")
    assert signals.autoheal_log(log) == {"restarts": 1, "restart_failures": 1, "by_container": {"traefik": 1}}
    # willfarrell/autoheal's lines (docker-entrypoint), three passes on one container and one on another
    loop = "".join("%s Container /%s (%s) found to be unhealthy - Restarting container now with 10s timeout\n"
                   % (t, n, i) for t, n, i in [("08:00:01", "edge-traefik-1", "1a2b3c4d5e6f"),
                                               ("08:02:31", "edge-traefik-1", "1a2b3c4d5e6f"),
                                               ("08:03:00", "grafana", "99aa"),
                                               ("08:05:01", "edge-traefik-1", "1a2b3c4d5e6f")])
    assert signals.autoheal_log(loop)["by_container"] == {"edge-traefik-1": 3, "grafana": 1}
