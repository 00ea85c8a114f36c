"""The keeper's textfile metrics: Prometheus's text format, one state of three, a counter that only grows."""
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import metrics as k3d_metrics

STOCK = {"name": "k3d-a-serverlb", "cluster": "a", "state": "not_fixed", "open_files": 1030, "connections": 1029, "worker_connections": 1029,
         "udp_sessions": 512, "udp_session_budget": None, "not_enough": {"udp 53": 3}}
FIXED = {"name": "k3d-b-serverlb", "cluster": "b", "state": "fixed", "open_files": 12, "worker_connections": 4096,
         "udp_sessions": 0, "udp_session_budget": 1024, "not_enough": {}}


def samples(text):
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_each_load_balancer_is_in_one_state_with_its_gauges():
    got = samples(k3d_metrics.text([STOCK, FIXED], k3d_metrics.add_not_enough({("k3d-a-serverlb", "a", "udp 53"): 0}, STOCK), 1700000000))
    assert got['homelab_edge_k3d_lb_state{k3d_cluster="a",lb="k3d-a-serverlb",state="not_fixed"}'] == "1"
    assert got['homelab_edge_k3d_lb_state{k3d_cluster="a",lb="k3d-a-serverlb",state="fixed"}'] == "0"
    assert got['homelab_edge_k3d_lb_state{k3d_cluster="b",lb="k3d-b-serverlb",state="fixed"}'] == "1"
    assert got['homelab_edge_k3d_lb_open_files{k3d_cluster="a",lb="k3d-a-serverlb"}'] == "1030"
    assert got['homelab_edge_k3d_lb_connections{k3d_cluster="a",lb="k3d-a-serverlb"}'] == "1029"
    assert got['homelab_edge_k3d_lb_udp_session_budget{k3d_cluster="b",lb="k3d-b-serverlb"}'] == "1024"
    assert 'homelab_edge_k3d_lb_udp_session_budget{k3d_cluster="a",lb="k3d-a-serverlb"}' not in got  # no budget: absent
    assert got['homelab_edge_k3d_lb_not_enough_total{k3d_cluster="a",lb="k3d-a-serverlb",server="udp 53"}'] == "3"
    assert got["homelab_edge_k3d_keeper_last_write_timestamp_seconds"] == "1700000000"


def test_the_not_enough_count_only_grows_and_a_new_key_goes_out_at_0_first():
    held = {}
    totals = k3d_metrics.add_not_enough({}, STOCK, held)
    assert totals == {("k3d-a-serverlb", "a", "udp 53"): 0} and held == {("k3d-a-serverlb", "a", "udp 53"): 3}
    totals = k3d_metrics.add_not_enough(totals, dict(STOCK, not_enough={"udp 53": 2, "tcp 443": 1}), held)
    assert totals == {("k3d-a-serverlb", "a", "udp 53"): 5, ("k3d-a-serverlb", "a", "tcp 443"): 0}
    totals = k3d_metrics.add_not_enough(totals, dict(STOCK, not_enough={}), held)
    assert totals == {("k3d-a-serverlb", "a", "udp 53"): 5, ("k3d-a-serverlb", "a", "tcp 443"): 1} and not held


def test_a_restarted_keeper_continues_the_counts_of_its_textfile():
    before = {("k3d-a-serverlb", "a", "udp 53"): 7, ('we"ird\\lb', "", "unnamed"): 2}
    assert k3d_metrics.read_totals(k3d_metrics.text([], before, 1)) == before
    assert k3d_metrics.read_totals("") == {} and k3d_metrics.read_totals(None) == {}
    # a file an older keeper wrote, its cluster label still named cluster: the counts go on
    old = 'homelab_edge_k3d_lb_not_enough_total{cluster="a",lb="k3d-a-serverlb",server="udp 53"} 7\n'
    assert k3d_metrics.read_totals(old) == {("k3d-a-serverlb", "a", "udp 53"): 7}
    # the label is k3d_cluster: "cluster" is what multi-cluster Prometheus setups set for themselves
    assert 'k3d_cluster="a"' in k3d_metrics.text([STOCK], {}, 1) and 'cluster="a"' not in k3d_metrics.text([STOCK], {}, 1).replace(
        'k3d_cluster="a"', "")


def test_every_metric_has_help_and_type_and_label_values_are_escaped():
    text = k3d_metrics.text([dict(FIXED, name='we"ird\\lb')], {}, 1)
    names = set(line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#"))
    for name in names:
        assert "# HELP %s " % name in text and "# TYPE %s " % name in text
    assert 'lb="we\\"ird\\\\lb"' in text


def test_the_busiest_worker_decides_the_connections():
    from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import signals as k3d_signals
    assert k3d_signals.worker_load("520 510\n12 0\n") == (532, 510, 1030)
    assert k3d_signals.worker_load("") == (None, None, None)
    assert k3d_signals.worker_load("garbage\n7 x\n") == (None, None, None)


def test_not_enough_lines_with_and_without_their_server_are_counted():
    """nginx names the client and server when connecting upstream fails, not
    when a datagram finds no free connection (seen on k3d's stock load
    balancer under DNS load: every line was the bare one)."""
    from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import signals as k3d_signals
    log = ("2026/12/02 03:18:46 [alert] 45#45: 1024 worker_connections are not enough\n"
           "2026/12/02 03:18:46 [alert] 45#45: *9 1024 worker_connections are not enough while connecting to "
           "upstream, udp client: 172.18.0.1, server: 0.0.0.0:53, upstream: \"172.18.0.3:53\"\n"
           "2026/12/02 03:18:47 [alert] 45#45: 1024 worker_connections are not enough\n")
    got = k3d_signals.log_signals(log)
    assert got["not_enough"] == {"unnamed": 2, "udp 53": 1} and got["not_enough_total"] == 3


def test_every_server_is_exported_from_0_so_its_first_line_is_an_increase():
    """increase() sees no rise in a series that starts at its first value: each key the load balancer has is
    written at 0 before any line, so the alert needs no new-series clause (which fired after a scrape gap)."""
    from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import config as k3d_config
    keys = k3d_config.report("k3d-b-serverlb", "b", {"worker_connections": 4096, "worker_rlimit_nofile": 16384,
                                                     "udp_servers": [{"port": "53", "proxy_timeout": "5s",
                                                                     "proxy_responses": "1", "limit_conn": 1024}],
                                                     "tcp_servers": [{"port": "443"}, {"port": "6443"}]},
                             16384)["not_enough_keys"]
    assert keys == ["tcp 443", "tcp 6443", "udp 53", "unnamed"]
    totals = k3d_metrics.add_not_enough({}, dict(FIXED, not_enough_keys=keys), {})
    assert totals == dict((("k3d-b-serverlb", "b", k), 0) for k in keys)
    totals = k3d_metrics.add_not_enough(totals, dict(FIXED, not_enough_keys=keys, not_enough={"udp 53": 4}), {})
    assert totals[("k3d-b-serverlb", "b", "udp 53")] == 4 and totals[("k3d-b-serverlb", "b", "tcp 443")] == 0
