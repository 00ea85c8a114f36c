"""The k3d load balancer fix on real k3d, with real traffic, through
everything the k3d CLI does to a load balancer.

Runs after converge: cluster "mol" has the fix and the keeper runs. The load
balancers are judged from the outside (lb_check: crossplane and /proc), not
with the module's own parser.
"""
import datetime
import os
import subprocess
import sys
import tempfile
import threading
import time

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.join(ROOT, "plugins")]
import adhoc  # noqa: E402
import k3d  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
from module_utils.k3d_serverlb import config as k3d_config  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
import lb_check  # noqa: E402
import probes  # noqa: E402

CLUSTER, BASE = "mol", 30000
STOCK, STOCK_BASE = "molstock", 30100
HOST = "127.0.0.1"
# the profiles molecule.yml gives the role (and so the keeper): DNS on 53 and 1053
WANT = dict(k3d_fix.DEFAULTS, udp_ports=k3d.UDP_PROFILES)
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")
KEEPER_CONFIG = "/etc/homelab-edge/k3d-serverlb-mol.json"
INSTALLED_KEEPER = "/usr/local/lib/homelab-edge/k3d-serverlb-keeper.py"


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def load_balancer(client, cluster=CLUSTER):
    return client.containers.get(k3d.lb_name(cluster))


def wait_fixed(client, cluster=CLUSTER, seconds=30):
    """Seconds until the load balancer is fixed (None if it never is)."""
    t0 = time.time()
    while time.time() - t0 < seconds:
        try:
            if not lb_check.shortfalls(load_balancer(client, cluster), WANT):
                return round(time.time() - t0, 1)
        except (docker.errors.NotFound, docker.errors.APIError, AssertionError, ValueError, KeyError):
            pass  # being recreated, or nginx not up yet
        time.sleep(0.5)
    return None


def values_connections(container):
    return int(k3d_config.parse_values(lb_check.read(container, k3d_container.VALUES_PATH))["settings"]["workerConnections"])


def test_live_config_has_the_fix(client):
    c = load_balancer(client)
    assert lb_check.shortfalls(c, WANT) == []
    # the container's own soft limit is the daemon's; the workers got the rlimit
    assert values_connections(c) == 1024  # k3d's values.yaml is k3d's


def under_load(container, base, rate, count):
    ep = k3d.endpoints(base)
    return probes.dns_under_load(container, HOST, ep["dns"], [ep["https"], ep["api"]], rate, count)


def test_before_the_fix_stock_k3d_fails(client):
    """k3d's defaults, 100 q/s for 20 s: alerts, failed lookups, failed HTTPS and API."""
    ctl = k3d.create(STOCK, STOCK_BASE)
    k3d.wait_serving(client, STOCK)
    dns, https, alerts = under_load(client.containers.get(ctl), STOCK_BASE, rate=100, count=2000)
    adhoc.record("k3d_serverlb", "before", alerts=alerts, dns_sent=dns["sent"], dns_answered=dns["answered"],
                 https_ok=https["ok"], https_failed=https["failed"])
    assert alerts > 0
    assert dns["failed"] > 0
    assert https["failed"] > 0


def test_after_the_fix_9000_queries_at_300_per_second(client):
    dns, https, alerts = under_load(load_balancer(client), BASE, rate=300, count=9000)
    adhoc.record("k3d_serverlb", "after", alerts=alerts, dns_sent=dns["sent"], dns_answered=dns["answered"],
                 dns_seconds=dns["seconds"], https_ok=https["ok"], https_failed=https["failed"])
    assert dns["sent"] == 9000
    assert dns["answered"] == 9000
    assert alerts == 0
    assert https["ok"] > 0 and https["failed"] == 0


def _dns_server(client, cluster, signal):
    rc, out = client.containers.get(k3d.server_name(cluster)).exec_run(["pkill", "-%s" % signal, "-x", "dnsmasq"])
    assert rc == 0, out


def hung_dns(client, cluster, base, rate=1500, seconds=30):
    """DNS server frozen while fresh-socket queries arrive at `rate`; HTTPS and
    the API of the same load balancer probed meanwhile; then the server
    resumes and DNS is timed back. Returns figures."""
    ep = k3d.endpoints(base)
    t0 = time.time()
    stop = threading.Event()
    load = {}
    loader = threading.Thread(target=lambda: load.update(probes.dns_load(
        HOST, ep["dns"], rate=rate, count=rate * seconds, stop=stop)), daemon=True)
    _dns_server(client, cluster, "STOP")
    try:
        loader.start()
        time.sleep(3)  # the sessions pile up
        prober = probes.Prober([ep["https"], ep["api"]])
        prober.start()
        time.sleep(seconds - 3)
        tcp = prober.stop()
    finally:
        _dns_server(client, cluster, "CONT")
    resumed = time.time()
    recovered = None
    while time.time() - resumed < 30:
        if probes.dns_load(HOST, ep["dns"][:1], rate=10, count=1, timeout=1)["answered"]:
            recovered = round(time.time() - resumed, 1)
            break
    stop.set()
    loader.join(30)
    alerts = probes.count_in_logs(load_balancer(client, cluster), probes.NOT_ENOUGH, t0)
    return dict(rate=rate, alerts=alerts, tcp_ok=tcp["ok"], tcp_failed=tcp["failed"], dns_recovered_s=recovered,
                dns_sent=load.get("sent"))


def test_budget_side_by_side_with_the_dns_server_hung(client):
    """The same fix with and without its UDP session budget, the DNS server
    hung under a rate that fills every connection without a budget: without
    it HTTPS and 6443 fail; with it they succeed every time, no alerts, and
    DNS answers again within 15 s of the server resuming."""
    stock = load_balancer(client, STOCK)
    res = adhoc.run_module("k3d_serverlb", {"names": [stock.name], "udp_ports": k3d.UDP_PROFILES})
    assert not res.get("failed"), res.get("msg")
    k3d_container.replace_file(stock, k3d_container.TEMPLATE_PATH, lb_check.without_budget(lb_check.read(stock, k3d_container.TEMPLATE_PATH)))
    k3d_container.render(stock, 30)
    udp = lb_check.nginx_conf.summary(lb_check.read(stock, k3d_container.NGINX_CONF))["udp"]
    assert udp and all(u["limit_conn"] is None and u["proxy_responses"] == "1" for u in udp.values())
    without = hung_dns(client, STOCK, STOCK_BASE)
    adhoc.record("k3d_serverlb", "hung_dns_without_budget", **without)
    with_budget = hung_dns(client, CLUSTER, BASE)
    adhoc.record("k3d_serverlb", "hung_dns_with_budget", **with_budget)
    assert without["alerts"] > 0 and without["tcp_failed"] > 0
    assert with_budget["tcp_ok"] > 0 and with_budget["tcp_failed"] == 0
    assert with_budget["alerts"] == 0
    assert with_budget["dns_recovered_s"] is not None and with_budget["dns_recovered_s"] <= 15
    k3d.delete(STOCK)


def test_node_create_and_delete_keep_the_fix_whole(client):
    """k3d rewrites values.yaml (1024 + ports x servers): the fix stays whole."""
    node = k3d.node_create(CLUSTER, "molextra")
    c = load_balancer(client)
    assert values_connections(c) == 1024 + 5 * 2  # k3d's own number: 5 ports (api included), 2 servers
    assert lb_check.shortfalls(c, WANT) == []
    assert lb_check.nginx_conf.summary(lb_check.read(c, k3d_container.NGINX_CONF))["worker_connections"] == WANT["worker_connections"]
    k3d.node_delete(node)
    assert values_connections(c) == 1024 + 5  # the seed's 1029
    assert wait_fixed(client, seconds=10) is not None
    conf = lb_check.read(c, k3d_container.NGINX_CONF)
    assert "molextra" not in conf  # k3d's change is rendered too


def test_cluster_stop_start_and_docker_restart_keep_the_fix(client):
    k3d.k3d("cluster", "stop", CLUSTER)
    k3d.k3d("cluster", "start", CLUSTER)
    k3d.wait_serving(client, CLUSTER)
    assert wait_fixed(client, seconds=20) is not None
    load_balancer(client).restart(timeout=2)
    k3d.wait_serving(client, CLUSTER)
    assert wait_fixed(client, seconds=20) is not None


class Watch(threading.Thread):
    """Poll a load balancer by name while k3d recreates it: when the new
    container's nginx.conf first carries the fix, and when its workers do."""

    def __init__(self, client, cluster, old_id, seconds=60):
        super(Watch, self).__init__(daemon=True)
        self.client, self.name, self.old_id, self.seconds = client, k3d.lb_name(cluster), old_id, seconds
        self.rendered = self.serving = self.workers = None

    def run(self):
        t0 = time.time()
        while time.time() - t0 < self.seconds and self.workers is None:
            try:
                c = self.client.containers.get(self.name)
                if c.id != self.old_id:
                    if self.rendered is None and "proxy_responses 1;" in lb_check.read(c, k3d_container.NGINX_CONF):
                        self.rendered = time.time()
                    limits = lb_check.nginx_conf.worker_open_file_limits(c)
                    if limits and self.serving is None:
                        self.serving = (time.time(), limits)
                    if limits == [WANT["worker_rlimit_nofile"]]:
                        self.workers = time.time()
            except (docker.errors.NotFound, docker.errors.APIError, AssertionError):
                pass
            time.sleep(0.1)


def started_at(container):
    ts = container.attrs["State"]["StartedAt"]
    return datetime.datetime.strptime(ts[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def test_cluster_edit_recreates_the_load_balancer_and_the_keeper_fixes_it(client):
    """k3d renames the load balancer, creates a new one from its image and
    deletes the old: the keeper patches the new one before its first render."""
    old = load_balancer(client)
    watch = Watch(client, CLUSTER, old.id)
    watch.start()
    k3d.port_add(CLUSTER, "127.0.0.1:%d:853/udp@loadbalancer" % (BASE + 85))
    watch.join(60)
    new = load_balancer(client)
    assert new.id != old.id
    t_start = started_at(new)
    figures = dict(rendered_fixed_after_start_s=round(watch.rendered - t_start, 2) if watch.rendered else None,
                   nginx_serving_after_start_s=round(watch.serving[0] - t_start, 2) if watch.serving else None,
                   first_workers_limits=watch.serving[1] if watch.serving else None,
                   workers_fixed_after_start_s=round(watch.workers - t_start, 2) if watch.workers else None)
    adhoc.record("k3d_serverlb", "recreate", **figures)
    assert watch.workers is not None and lb_check.shortfalls(new, WANT) == []
    assert figures["rendered_fixed_after_start_s"] < 5
    # nginx never served without the fix: its first workers already had the rlimit
    assert figures["first_workers_limits"] == [WANT["worker_rlimit_nofile"]]
    assert [c.name for c in client.containers.list(all=True) if k3d_container.is_renamed_leftover(c.name)] == []


def test_a_second_cluster_created_after_the_role_is_fixed_by_the_keeper(client):
    k3d.create("mol2", BASE + 200)
    k3d.wait_serving(client, "mol2")
    took = wait_fixed(client, "mol2", seconds=30)
    adhoc.record("k3d_serverlb", "second_cluster", fixed_after_create_s=took)
    assert took is not None


def keeper_pid():
    out = subprocess.run(["pgrep", "-f", "k3d-serverlb-keeper.py --config %s" % KEEPER_CONFIG],
                         capture_output=True, text=True, check=False)
    return out.stdout.split()


def status_table():
    """playbooks/status.yml on this host as a k3d host; its table lines."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("all:\n  children:\n    k3d_hosts:\n      hosts:\n        k3d-host:\n"
                "          ansible_connection: local\n          ansible_python_interpreter: %s\n"
                "          k3d_serverlb_clusters: [mol, mol2]\n"
                "          k3d_serverlb_udp_ports: {53: dns, 1053: dns}\n" % sys.executable)
    out = subprocess.run(["ansible-playbook", "-i", f.name, os.path.join(ROOT, "playbooks", "status.yml")],
                         capture_output=True, text=True, check=False, timeout=300)
    os.unlink(f.name)
    assert out.returncode == 0, out.stdout[-2000:]
    return [ln for ln in out.stdout.splitlines() if "serverlb" in ln and ("fixed" in ln or "NOT FIXED" in ln)]


def test_check_and_status_say_not_fixed_when_k3d_left_a_load_balancer_short(client):
    """Keeper stopped, k3d recreates a load balancer: check mode and the
    status playbook say so; the role fixes it again."""
    subprocess.run([sys.executable, KEEPER, "--config", KEEPER_CONFIG, "--stop"], check=True, capture_output=True)
    k3d.port_add("mol2", "127.0.0.1:%d:853/udp@loadbalancer" % (BASE + 285))
    k3d.wait_serving(client, "mol2")
    assert lb_check.shortfalls(load_balancer(client, "mol2"), WANT)  # stock again
    res = adhoc.run_module("k3d_serverlb", {"clusters": ["mol", "mol2"], "udp_ports": k3d.UDP_PROFILES}, check=True)
    by_name = dict((r["name"], r) for r in res["load_balancers"])
    assert by_name[k3d.lb_name("mol2")]["changed"] and not by_name[k3d.lb_name(CLUSTER)]["changed"]
    lines = status_table()
    assert any("k3d-mol2-serverlb" in ln and "NOT FIXED" in ln for ln in lines), lines
    assert any("k3d-mol-serverlb" in ln and " fixed " in ln and "NOT FIXED" not in ln for ln in lines), lines
    # the keeper again, as the role runs it: it fixes mol2 on start
    subprocess.run([sys.executable, INSTALLED_KEEPER, "--config", KEEPER_CONFIG, "--daemon"], check=True,
                   capture_output=True)
    assert wait_fixed(client, "mol2", seconds=60) is not None
