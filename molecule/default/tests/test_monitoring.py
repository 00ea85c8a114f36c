"""The roles' alert rules in a real Prometheus (Debian's, lab/monitoring.py),
on the NAS (Traefik's metrics entrypoint, node_exporter, blackbox_exporter's
probes of the site through the VPS from a WAN client) and on the k3d host
(the keeper's textfile through node_exporter, probes through each load
balancer): quiet on the healthy lab, each firing on the fault it names, quiet
again once the fix is in; and autoheal's message about a restart arriving at
a receiver."""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import docker
import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.join(ROOT, "plugins")]
import adhoc  # noqa: E402
import dashboards  # noqa: E402
import hosts  # noqa: E402
import k3d  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
import monitoring  # noqa: E402
import probes  # noqa: E402
import svgplot  # noqa: E402
import upstream_images  # noqa: E402

INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
FAULTS = {}  # fault: (start, end), seconds since the epoch: the picture's time ranges
NAS = testinfra.get_host("docker://lab-nas")
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")
INSTALLED_KEEPER = "/usr/local/lib/homelab-edge/k3d-serverlb-keeper.py"  # beside its library (the role's default)


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def nas_prometheus():
    return "http://%s:%d" % (hosts.address("lab-nas", "lab-lan"), monitoring.NAS_PROMETHEUS)


def k3d_prometheus():
    return "http://127.0.0.1:%d" % monitoring.K3D_PROMETHEUS


def api(prom, path, **params):
    url = prom + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]


def reload_rules(prom):
    urllib.request.urlopen(urllib.request.Request(prom + "/-/reload", method="POST"), timeout=10).close()


def traefik_target():
    """Traefik's metrics entrypoint where it is now (re-creations move it)."""
    ip = NAS.check_output("docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' traefik").split()[0]
    NAS.check_output("echo '[{\"targets\": [\"%s:9101\"]}]' > %s/targets/traefik.json" % (ip, monitoring.NAS_DIR))


def firing(prom, name=None):
    return [a for a in api(prom, "/api/v1/alerts")["alerts"]
            if a["state"] == "firing" and (name is None or a["labels"]["alertname"] == name)]


def wait(what, check, seconds=60):
    """check() until it gives something (bounded); a call to the API that timed out or was refused (a flood
    shares the NAS's address with Prometheus) counts as "not yet", and the last such error is in the failure."""
    t0, error = time.time(), None
    while time.time() - t0 < seconds:
        try:
            got = check()
        except OSError as e:
            got, error = None, e
        if got:
            return got
        time.sleep(1)
    raise AssertionError("%s: not within %d s%s"
                         % (what, seconds, "" if error is None else " (last API error: %s)" % error))


@pytest.fixture(scope="module", autouse=True)
def prometheus_ready():
    traefik_target()
    for prom in (nas_prometheus(), k3d_prometheus()):
        reload_rules(prom)
    want = {nas_prometheus(): ["blackbox-edge", "node", "traefik"], k3d_prometheus(): ["blackbox-k3d"] * 6 + ["node"]}

    def ready():
        for prom, jobs in want.items():
            targets = api(prom, "/api/v1/targets")["activeTargets"]
            if sorted(t["labels"]["job"] for t in targets if t["health"] == "up") != jobs:
                return False
        return True
    wait("every target found and up", ready, 60)  # Traefik's file is read every 2 s


def test_each_prometheus_loads_the_roles_rules_and_scrapes_the_keepers_metrics():
    groups = dict((p, sorted(g["name"] for g in api(p, "/api/v1/rules")["groups"]))
                  for p in (nas_prometheus(), k3d_prometheus()))
    assert groups[nas_prometheus()] == ["homelab-edge-drain", "homelab-edge-traefik"]
    assert groups[k3d_prometheus()] == ["homelab-edge-k3d-serverlb"]
    jobs = sorted(t["labels"]["job"] for t in api(nas_prometheus(), "/api/v1/targets")["activeTargets"])
    assert jobs == ["blackbox-edge", "node", "traefik"]
    states = wait("the keeper's metrics in Prometheus", lambda: api(
        k3d_prometheus(), "/api/v1/query", query='homelab_edge_k3d_lb_state{state="fixed"} == 1')["result"])
    assert sorted(r["metric"]["lb"] for r in states) == ["k3d-lab-serverlb", "k3d-lab2-serverlb"]


def probe_values(prom, job):
    """{instance: probe_success} of a blackbox job, as Prometheus has it now."""
    return dict((r["metric"]["instance"], r["value"][1])
                for r in api(prom, "/api/v1/query", query='probe_success{job="%s"}' % job)["result"])


def test_the_probes_answer_through_each_load_balancer_and_through_the_vps():
    """blackbox_exporter (Debian's): DNS, HTTPS and the API through both k3d load balancers, from this host;
    the site through the VPS, from a client on the WAN. Every probe answers on the healthy lab."""
    want = sorted(t for c, base in monitoring.K3D_CLUSTERS for e in [k3d.endpoints(base)]
                  for t in ["127.0.0.1:%d" % e["dns"][0], "%s:%d" % e["https"], "%s:%d" % e["api"]])
    k3d_probes = wait("the k3d probes scraped", lambda: len(probe_values(k3d_prometheus(), "blackbox-k3d")) == len(want)
                      and probe_values(k3d_prometheus(), "blackbox-k3d"), 60)
    edge = wait("the edge probe scraped", lambda: probe_values(nas_prometheus(), "blackbox-edge"), 60)
    adhoc.record("monitoring", "probes_healthy", k3d=k3d_probes, edge=edge)
    assert sorted(k3d_probes) == want and set(k3d_probes.values()) == {"1"}, k3d_probes
    assert len(edge) == 1 and list(edge.values()) == ["1"], edge


def test_the_healthy_lab_fires_no_alert():
    """Every probe answering (a flood of an earlier test may still be in the probes' 20-s window), then a few
    evaluations (every 2 s here): no alert fires."""
    wait("every probe answering", lambda: set(probe_values(k3d_prometheus(), "blackbox-k3d").values()) == {"1"}
         and set(probe_values(nas_prometheus(), "blackbox-edge").values()) == {"1"}, 60)
    time.sleep(25)  # longer than the probes' window
    assert [a["labels"]["alertname"] for p in (nas_prometheus(), k3d_prometheus()) for a in firing(p)] == []


def value(prom, expr):
    """The one sample of an instant query, as a number."""
    found = api(prom, "/api/v1/query", query=expr)["result"]
    assert len(found) == 1, (expr, found)
    return float(found[0]["value"][1])


def test_traefiks_own_time_wait_fires_the_alert_where_the_hosts_counters_see_nothing(client):
    """600 short connections from the LAN to Traefik's port 80 (its redirect to HTTPS), each closed by Traefik
    first (`Connection: close`; over TLS curl's close ends in a reset, which leaves no TIME_WAIT): Traefik's own
    namespace (the tcp_drain role's textfile, homelab_edge_netns_*) holds their TIME_WAIT and counts their
    accepts, and TcpTimeWaitHigh fires for it; the NAS's own counters, all its node_exporter reads, stay
    low (the test fails on them). Quiet again once TIME_WAIT's 60 s are over."""
    prom, n = nas_prometheus(), 600
    opens = 'homelab_edge_netns_tcp_passive_opens_total{container="traefik"}'
    host_opens = 'node_netstat_Tcp_PassiveOpens{job="node"}'
    before = (value(prom, opens), value(prom, host_opens))
    client.containers.get("lab-lan-client").exec_run(
        # eight at a time: all 600 well inside TIME_WAIT's 60 s on a loaded machine (one at a time took 50 s)
        ["sh", "-c", "seq %d | xargs -P 8 -I{} curl -s -o /dev/null -H 'Connection: close' http://%s/"
                     % (n, hosts.address("lab-nas", "lab-lan"))])
    alerts = wait("TcpTimeWaitHigh firing", lambda: firing(prom, "TcpTimeWaitHigh"), 30)
    tw, host_tw = value(prom, 'homelab_edge_netns_tcp_time_wait{container="traefik"}'), value(prom, 'node_sockstat_TCP_tw{job="node"}')
    # the counters as the timer wrote them last (every 2 s here) and Prometheus scraped them (every 2 s)
    wait("Traefik's accepts counted", lambda: value(prom, opens) - before[0] >= 0.9 * n, 20)
    after = (value(prom, opens), value(prom, host_opens))
    adhoc.record("monitoring", "alert_time_wait", labels=[a["labels"] for a in alerts], traefik_time_wait=tw,
                 host_time_wait=host_tw, traefik_accepts=after[0] - before[0], host_accepts=after[1] - before[1])
    assert [a["labels"].get("container") for a in alerts] == ["traefik"], alerts
    assert tw >= 300 and host_tw < 300, (tw, host_tw)
    assert after[0] - before[0] >= 0.9 * n and after[1] - before[1] < n / 10, (before, after)
    wait("TcpTimeWaitHigh quiet once TIME_WAIT is over", lambda: not firing(prom, "TcpTimeWaitHigh"), 100)


def test_conntrack_full_of_a_flood_after_the_requests_stopped_fires_its_alerts(client):
    """Unanswered UDP from the LAN to 4 x 55,000 of the NAS's ports (a connection tracking entry each, for the
    kernel's 30 s) while no new connections come: the NAS's conntrack holds 0.84 of its limit (the kernel's
    nf_conntrack_max; the count is the NAS's namespace's own, so nothing else on this machine nears it), and
    ConntrackHighAfterRequestsStopped and ConntrackNearLimit fire for it; quiet again once the entries expire."""
    prom, names = nas_prometheus(), ("ConntrackHighAfterRequestsStopped", "ConntrackNearLimit")
    share = 'node_nf_conntrack_entries{job="node"} / on (instance) node_nf_conntrack_entries_limit{job="node"}'
    assert [n for n in names if firing(prom, n)] == []
    script = ("import socket\n"
              "for s in [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for i in range(4)]:\n"
              "    for port in range(1024, 56024):\n"
              "        try:\n            s.sendto(b'x', ('%s', port))\n"
              "        except OSError:\n            pass\n" % hosts.address("lab-nas", "lab-lan"))
    rc, out = client.containers.get("lab-lan-client").exec_run(["python3", "-c", script])
    assert rc == 0, out
    alerts = wait("both conntrack alerts firing", lambda: all(firing(prom, n) for n in names) and
                  [a for n in names for a in firing(prom, n)], 20)
    adhoc.record("monitoring", "alert_conntrack", share=value(prom, share), labels=[a["labels"] for a in alerts])
    assert sorted((a["labels"]["alertname"], a["labels"]["instance"]) for a in alerts) == \
        [(n, "127.0.0.1:9100") for n in sorted(names)], alerts
    wait("the conntrack alerts quiet once the entries expire", lambda: not any(firing(prom, n) for n in names), 90)


def test_a_flood_that_keeps_the_kernel_busy_fires_system_cpu_above_user(client):
    """Unanswered UDP from the LAN client to 55,000 of the NAS's ports, over and over for 40 s, from two senders
    run in the client's network namespace at the highest priority (nice -20: the lab's CPU is this whole machine's,
    which the scenarios beside share; their programs must not outweigh the flood). The kernel's work per packet
    (sending it, a conntrack entry, receiving it in the NAS's namespace, refusing it) is far above the senders'
    own: system and softirq CPU above user and above a quarter of the cores while conntrack holds the flood's
    entries, and SystemCpuAboveUserCpu fires; quiet once the senders stopped and the entries expired (30 s).
    Each sender rests a quarter of its time: a real flood has no process that outranks the host's programs, and
    two senders at -20 that never rest left the NAS's node_exporter unscraped for the whole flood on a slower
    machine (CI's, stop 46: no sample, so no alert)."""
    prom = nas_prometheus()
    wait("SystemCpuAboveUserCpu quiet before", lambda: not firing(prom, "SystemCpuAboveUserCpu"), 60)

    def flood_once():
        sender = ("import socket, time\n"
                  "end, s, sent, errors = time.time() + 40, socket.socket(socket.AF_INET, socket.SOCK_DGRAM), 0, 0\n"
                  "while time.time() < end:\n"
                  "    for first in range(1024, 56024, 5000):\n"
                  "        t = time.time()\n"
                  "        for port in range(first, min(first + 5000, 56024)):\n"
                  "            try:\n                s.sendto(b'x', ('%s', port))\n                sent += 1\n"
                  "            except OSError:\n                errors += 1\n"
                  "        time.sleep((time.time() - t) / 3)\n"
                  "print(sent, errors)\n" % hosts.address("lab-nas", "lab-lan"))
        pid = str(client.containers.get("lab-lan-client").attrs["State"]["Pid"])
        start = time.time()
        senders = [subprocess.Popen(["nsenter", "-t", pid, "-n", "nice", "-n", "-20", sys.executable, "-c", sender],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
                   for dummy in range(2)]
        cpu = 'sum by (instance) (rate(node_cpu_seconds_total{job="node",mode=~"%s"}[30s]))'
        alerts, ran = [], []
        try:
            alerts = wait("SystemCpuAboveUserCpu firing", lambda: firing(prom, "SystemCpuAboveUserCpu"), 45)
        except AssertionError:
            pass  # no answer in time from the API: asked again below, from Prometheus's own record of its alerts
        finally:
            for p in senders:
                out, err = p.communicate(timeout=60)
                ran.append({"rc": p.returncode, "sent_errors": out.split(), "stderr": err[-300:]})
        since = "%ds" % (time.time() - start + 2)
        if not alerts:
            # the flood's packets share the NAS's LAN address with the API, so on a loaded machine its answers can
            # time out while the scrapes (over loopback) and the rule's evaluation go on: ALERTS holds what fired
            alerts = [{"labels": s["metric"], "value": "ALERTS"} for s in api(prom, "/api/v1/query", query=(
                'max_over_time(ALERTS{alertname="SystemCpuAboveUserCpu",alertstate="firing"}[%s])' % since))["result"]]

        def read(expr):
            try:
                return value(prom, expr)
            except (AssertionError, OSError) as e:
                return "not read: %s" % e

        # what a failure needs: whether the senders ran, and whether node_exporter was scraped during the flood
        seen = {"senders": ran, "node_scrapes": read('sum(count_over_time(up{job="node"}[%s]))' % since),
                "node_up": read('sum(sum_over_time(up{job="node"}[%s]))' % since),
                "system_softirq": read(cpu % "system|softirq"), "user": read(cpu % "user")}
        adhoc.record("monitoring", "alert_system_cpu", labels=[a["labels"] for a in alerts],
                     value=alerts[0]["value"] if alerts else None, **seen)
        return alerts, seen

    # the rule compares the kernel's CPU with user space's, host-wide: where the scenarios beside (make test's other
    # stream) kept user space busier than the flood kept the kernel, the rule's condition never held - the flood is
    # run once more (at most), and only then
    alerts, seen = flood_once()
    if not alerts and isinstance(seen["user"], float) and isinstance(seen["system_softirq"], float) \
            and seen["user"] >= seen["system_softirq"]:
        wait("SystemCpuAboveUserCpu quiet before", lambda: not firing(prom, "SystemCpuAboveUserCpu"), 60)
        alerts, seen = flood_once()
    assert [a["labels"]["instance"] for a in alerts] == ["127.0.0.1:9100"], (alerts, seen)
    wait("SystemCpuAboveUserCpu quiet again", lambda: not firing(prom, "SystemCpuAboveUserCpu"), 90)


def test_a_dns_server_hung_behind_the_load_balancer_fires_the_symptom_alert_and_nothing_after(client):
    """The load balancer runs and is fixed (up stays 1, its keeper's metrics look fine); the DNS server behind it
    answers nothing. Only the probes through it see that: K3dLoadBalancerNotAnswering fires for lab's DNS port
    alone, and is quiet again once the server answers."""
    dns = "127.0.0.1:%d" % k3d.endpoints(dict(monitoring.K3D_CLUSTERS)["lab"])["dns"][0]
    assert firing(k3d_prometheus(), "K3dLoadBalancerNotAnswering") == []
    start = time.time()
    with k3d.dns_server_hung(client, "lab"):
        alerts = wait("K3dLoadBalancerNotAnswering firing", lambda: firing(k3d_prometheus(),
                                                                           "K3dLoadBalancerNotAnswering"), 60)
        adhoc.record("monitoring", "alert_k3d_not_answering", instances=[a["labels"]["instance"] for a in alerts],
                     value=alerts[0]["value"])
        assert [(a["labels"]["instance"], a["labels"]["k3d_cluster"]) for a in alerts] == [(dns, "lab")], alerts
        # and the queries it never answers hold their sessions for the fix's whole UDP timeout (5 s): at
        # budget / 5 queries a second they fill the fix's UDP budget, and the near-budget alert names lab's
        budget = value(k3d_prometheus(), 'homelab_edge_k3d_lb_udp_session_budget{lb="k3d-lab-serverlb"}')
        load = threading.Thread(target=probes.dns_load, args=("127.0.0.1", [int(dns.split(":")[1])],
                                                              int(budget / 5), int(budget / 5) * 15))
        load.start()
        try:
            near = wait("K3dLoadBalancerUdpSessionsNearBudget firing", lambda: firing(
                k3d_prometheus(), "K3dLoadBalancerUdpSessionsNearBudget"), 30)
        finally:
            load.join(60)
        adhoc.record("monitoring", "alert_udp_near_budget", budget=budget, rate=int(budget / 5),
                     labels=[a["labels"] for a in near], value=near[0]["value"])
        assert [a["labels"]["lb"] for a in near] == ["k3d-lab-serverlb"], near
    wait("K3dLoadBalancerNotAnswering quiet again", lambda: not firing(k3d_prometheus(),
                                                                       "K3dLoadBalancerNotAnswering"), 60)
    wait("K3dLoadBalancerUdpSessionsNearBudget quiet again", lambda: not firing(
        k3d_prometheus(), "K3dLoadBalancerUdpSessionsNearBudget"), 60)
    FAULTS["k3d"] = (start - 20, time.time() + 10)


def test_every_dashboard_panel_returns_data_from_the_labs_prometheus():
    """The dashboards the roles wrote are the ones they ship, and each panel's every query returns data in the
    lab: the k3d one from this host's Prometheus (the keeper's metrics), the aftermath one from the NAS's (its
    node_exporter). Grafana itself does not run here (AGPL, not packaged)."""
    with open(os.path.join(monitoring.K3D_DIR, "dashboards", "k3d.json")) as f:
        written = {"k3d_serverlb": f.read(),
                   "tcp_drain": NAS.file(monitoring.NAS_DIR + "/dashboards/aftermath.json").content_string}
    where = {"k3d_serverlb": k3d_prometheus(), "tcp_drain": nas_prometheus()}
    empty = []
    for path in dashboards.files():
        role = path.split(os.sep)[-3]
        shipped = dashboards.load(path)
        assert json.loads(written[role]) == shipped, role
        for title, ref, expr in dashboards.queries(shipped):
            if not api(where[role], "/api/v1/query", query=expr)["result"]:
                empty.append((role, title, ref, expr))
    assert empty == []


def mixed_clients(client, vps, n=40):
    """Ordinary requests from both clients again: the access log's last
    requests (status's per-IP check) are no flood of one address."""
    for c in ("lab-client1", "lab-client2"):
        client.containers.get(c).exec_run(["sh", "-c", "for i in $(seq %d); do curl -sk -o /dev/null --resolve "
                                                       "site.nas.lab:443:%s https://site.nas.lab/; done" % (n, vps)])


def scraped_429s():
    """Traefik's router 429s as the NAS's Prometheus last scraped them (0 before the first)."""
    got = api(nas_prometheus(), "/api/v1/query", query='sum(traefik_router_requests_total{code="429"})')["result"]
    return float(got[0]["value"][1]) if got else 0.0


def test_the_429_alert_fires_during_a_flood_through_the_vps_and_not_after(client):
    """Two waves from one address through the VPS (Traefik's 429 counter
    starts at its first 429: a flood shows as its growth): the alert fires
    for the NAS's Traefik and on the site router (the limit's own 429s: no
    app behind answers 429 here), and is quiet again after."""
    vps = hosts.address("lab-vps", "lab-wan")
    waves = []
    try:
        before = scraped_429s()
        for wave in range(2):
            flood = probes.https_flood(client.containers.get("lab-client1"), vps, "/slower", 150, 443, "site.nas.lab")
            waves.append(flood.result())
            # Prometheus scraped this wave's 429s before the next wave (every 2 s here; bounded): the growth fires
            wait("wave %d's 429s scraped" % (wave + 1), lambda: scraped_429s() >= before + 50 * (wave + 1), 60)
        alerts = wait("TraefikRateLimited firing", lambda: firing(nas_prometheus(), "TraefikRateLimited"), 30)
        routers = firing(nas_prometheus(), "TraefikRouterRateLimited")
        adhoc.record("monitoring", "alert_429", waves=waves, alerts=[a["labels"] for a in alerts + routers],
                     value=alerts[0]["value"])
        assert [w.get("429") for w in waves] == [50, 50], waves
        assert len(alerts) == 1 and "entrypoint" not in alerts[0]["labels"], alerts
        assert [a for a in routers if "site@" in a["labels"]["router"]], routers
        wait("TraefikRateLimited quiet again", lambda: not firing(nas_prometheus(), "TraefikRateLimited"), 90)
    finally:
        mixed_clients(client, vps)


def test_the_connection_alert_fires_on_k3ds_stock_load_balancer_and_not_after_the_role(client):
    """As test_diagnose: the keeper stopped, k3d re-creates lab2's load
    balancer (stock), 100 DNS queries/s; the keeper's metrics written once
    before the load (each server's count at 0) and once after (it fixes
    nothing then): the count rose. Then the k3d tag, the same load: quiet."""
    subprocess.run([sys.executable, KEEPER, "--config", k3d_fix.KEEPER_CONFIG, "--stop"], check=True, capture_output=True)
    ep = k3d.endpoints(10100)
    try:
        k3d.port_add("lab2", "127.0.0.1:10186:854/udp@loadbalancer")
        k3d.wait_serving(client, "lab2")
        before = int(time.time())
        subprocess.run([sys.executable, INSTALLED_KEEPER, "--config", k3d_fix.KEEPER_CONFIG, "--metrics-once"],
                       check=True, capture_output=True, timeout=120)
        # the counts at 0 are in: Prometheus scraped that write (every 2 s here; bounded), which says when it was made
        wait("the keeper's write scraped", lambda: [r for r in api(k3d_prometheus(), "/api/v1/query", query=(
            "homelab_edge_k3d_keeper_last_write_timestamp_seconds"))["result"] if float(r["value"][1]) >= before], 60)
        probes.dns_load_until_out_of_connections(client.containers.get(k3d.lb_name("lab2")), "127.0.0.1", ep["dns"])
        subprocess.run([sys.executable, INSTALLED_KEEPER, "--config", k3d_fix.KEEPER_CONFIG, "--metrics-once"],
                       check=True, capture_output=True, timeout=120)
        high = wait("K3dLoadBalancerConnectionsHigh firing", lambda: [
            a for a in firing(k3d_prometheus(), "K3dLoadBalancerConnectionsHigh")
            if a["labels"]["lb"] == "k3d-lab2-serverlb"], 30)
        out_of = sorted(set(a["labels"]["lb"] for a in firing(k3d_prometheus(), "K3dLoadBalancerOutOfConnections")))
        not_fixed = sorted(a["labels"]["lb"] for a in firing(k3d_prometheus(), "K3dLoadBalancerNotFixed"))
        # the keeper stopped: its last write ages past k3d_serverlb_alert_stale_seconds (20 s in the lab)
        stale = wait("K3dKeeperMetricsStale firing", lambda: firing(k3d_prometheus(), "K3dKeeperMetricsStale"), 60)
        adhoc.record("monitoring", "alert_k3d_stock", value=high[0]["value"], out_of_connections=out_of,
                     not_fixed=not_fixed, stale=stale[0]["value"])
        assert out_of == ["k3d-lab2-serverlb"] and not_fixed == ["k3d-lab2-serverlb"]
    finally:
        out = subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(ROOT, "site.yml"), "--tags", "k3d"],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stdout[-2000:]
    probes.dns_load("127.0.0.1", ep["dns"], rate=100, count=1500)

    # the keeper writes every 5 s (inventories/lab), Prometheus scrapes every 2 s: fixed and quiet again once
    # both have run after site.yml restarted the keeper (bounded: a loaded machine may take longer than 12 s)
    def fixed_and_quiet():
        fixed = api(k3d_prometheus(), "/api/v1/query",
                    query='homelab_edge_k3d_lb_state{lb="k3d-lab2-serverlb",state="fixed"}')["result"]
        names = {a["labels"]["alertname"] for a in firing(k3d_prometheus())}
        return (fixed and fixed[0]["value"][1] == "1"
                and not names & {"K3dLoadBalancerConnectionsHigh", "K3dLoadBalancerNotFixed", "K3dKeeperMetricsStale"})
    wait("k3d-lab2-serverlb fixed and its alerts quiet again", fixed_and_quiet, 60)


def test_keeper_metrics_absent_fires_when_no_series_reaches_prometheus():
    """The keeper stopped and its textfile gone (as a node_exporter reading another directory sees it): no
    series at all, which K3dKeeperMetricsStale cannot see; K3dKeeperMetricsAbsent fires, and is quiet once the
    keeper writes again."""
    textfile = os.path.join(monitoring.K3D_DIR, "textfile", "homelab_edge_k3d.prom")
    subprocess.run([sys.executable, INSTALLED_KEEPER, "--config", k3d_fix.KEEPER_CONFIG, "--stop"], check=True,
                   capture_output=True)
    try:
        os.unlink(textfile)
        absent = wait("K3dKeeperMetricsAbsent firing", lambda: firing(k3d_prometheus(), "K3dKeeperMetricsAbsent"), 30)
        adhoc.record("monitoring", "alert_keeper_absent", labels=absent[0]["labels"])
    finally:
        subprocess.run([sys.executable, INSTALLED_KEEPER, "--config", k3d_fix.KEEPER_CONFIG, "--daemon"], check=True,
                       capture_output=True)
    wait("K3dKeeperMetricsAbsent quiet", lambda: not firing(k3d_prometheus(), "K3dKeeperMetricsAbsent"), 30)
    assert firing(k3d_prometheus(), "K3dKeeperMetricsStale") == []


def test_the_container_counters_writer_stopped_gone_and_a_container_not_running_fire_their_alerts():
    """The writer of Traefik's own socket counters (tcp_drain's timer on the NAS) stopped: its last write ages
    past tcp_drain_alert_stale_seconds (10 s in the lab) and ContainerSocketMetricsStale fires; its textfile
    gone: ContainerSocketMetricsAbsent; one pass for a container that does not run: ContainerSocketsNotRead
    for it. The timer started again: all three quiet."""
    prom, textfile = nas_prometheus(), "/srv/monitoring/textfile/homelab_edge_netns.prom"  # inventories/lab
    writer = "/usr/local/lib/homelab-edge/netns-sockets/homelab-edge-netns-sockets.py"   # the role's default
    NAS.check_output("systemctl stop homelab-edge-netns-sockets.timer")
    try:
        stale = wait("ContainerSocketMetricsStale firing", lambda: firing(prom, "ContainerSocketMetricsStale"), 40)
        NAS.check_output("rm -f %s" % textfile)
        absent = wait("ContainerSocketMetricsAbsent firing", lambda: firing(prom, "ContainerSocketMetricsAbsent"), 30)
        NAS.check_output("python3 %s --dir %s traefik lab-not-running" % (writer, os.path.dirname(textfile)))
        not_read = wait("ContainerSocketsNotRead firing", lambda: firing(prom, "ContainerSocketsNotRead"), 30)
        adhoc.record("monitoring", "alert_container_counters", stale=stale[0]["value"], absent=absent[0]["labels"],
                     not_read=[a["labels"] for a in not_read])
        assert [a["labels"]["container"] for a in not_read] == ["lab-not-running"], not_read
    finally:
        NAS.check_output("systemctl start homelab-edge-netns-sockets.timer")
    for name in ("ContainerSocketMetricsStale", "ContainerSocketMetricsAbsent", "ContainerSocketsNotRead"):
        wait("%s quiet" % name, lambda n=name: not firing(prom, n), 30)


def lan_site(path, host="site.nas.lab"):
    """curl's command for a host name on the NAS, from the LAN (straight to Traefik's port 443, not through the VPS)."""
    return "curl -sk -o /dev/null --resolve %s:443:%s https://%s%s" % (host, hosts.address("lab-nas", "lab-lan"), host,
                                                                       path)


def test_slow_requests_fire_traefik_slow_and_quiet_after(client):
    """10 requests at once from the LAN to the site's /slower (6 s each, under the in-flight amount of 50): the
    99th percentile of the entrypoint's request duration is in Traefik's last bucket (above 5 s) and TraefikSlow
    fires for that entrypoint (lab threshold 2 s, for 0s); quiet once they left the 30-s window."""
    prom = nas_prometheus()
    wait("TraefikSlow quiet before", lambda: not firing(prom, "TraefikSlow"), 60)  # an earlier test's requests may be in its window
    rc, out = client.containers.get("lab-lan-client").exec_run(
        ["sh", "-c", "for i in $(seq 10); do %s & done; wait" % lan_site("/slower")])
    assert rc == 0, out
    slow = wait("TraefikSlow firing", lambda: firing(prom, "TraefikSlow"), 30)
    adhoc.record("monitoring", "alert_slow", labels=[a["labels"] for a in slow], value=slow[0]["value"])
    assert len(slow) == 1 and slow[0]["labels"]["entrypoint"] != "homelab-edge-metrics", slow
    assert float(slow[0]["value"]) > 2, slow
    wait("TraefikSlow quiet again", lambda: not firing(prom, "TraefikSlow"), 60)


def test_connections_that_send_nothing_fire_open_connections_high_and_quiet_after(client):
    """300 TCP connections from the LAN to Traefik's port 443 that send no request (a slow-TLS flood's shape: no
    429, no request duration) held for 20 s: Traefik v3's open connections on that entrypoint pass the lab's
    threshold (200) and TraefikOpenConnectionsHigh fires; quiet once they are closed."""
    prom = nas_prometheus()
    wait("TraefikOpenConnectionsHigh quiet before", lambda: not firing(prom, "TraefikOpenConnectionsHigh"), 60)  # an earlier test's requests may be in its window
    hold = ("import socket, time\n"
            "socks = [socket.create_connection(('%s', 443), timeout=5) for i in range(300)]\n"
            "time.sleep(20)\n"
            "for s in socks:\n    s.close()\n" % hosts.address("lab-nas", "lab-lan"))
    client.containers.get("lab-lan-client").exec_run(["python3", "-c", hold], detach=True)
    held = wait("TraefikOpenConnectionsHigh firing", lambda: firing(prom, "TraefikOpenConnectionsHigh"), 20)
    adhoc.record("monitoring", "alert_open_connections", labels=[a["labels"] for a in held], value=held[0]["value"])
    assert len(held) == 1 and 300 <= float(held[0]["value"]) < 400, held
    wait("TraefikOpenConnectionsHigh quiet again", lambda: not firing(prom, "TraefikOpenConnectionsHigh"), 40)


def test_requests_for_pages_that_are_not_there_fire_client_errors_and_quiet_after(client):
    """200 requests from the LAN for host names no router of the NAS has (Traefik's own 404, a scanner's shape)
    within a few seconds: TraefikClientErrors fires for the entrypoint (lab threshold 1/s over 30 s, for 0s); quiet
    once they left the window. The 429s of the flood test before never counted (TraefikRateLimited's)."""
    prom = nas_prometheus()
    wait("TraefikClientErrors quiet before", lambda: not firing(prom, "TraefikClientErrors"), 60)  # an earlier test's requests may be in its window
    rc, out = client.containers.get("lab-lan-client").exec_run(
        ["sh", "-c", "for i in $(seq 200); do %s; done" % lan_site("/", "scan-$i.nas.lab")])
    assert rc == 0, out
    errors = wait("TraefikClientErrors firing", lambda: firing(prom, "TraefikClientErrors"), 20)
    adhoc.record("monitoring", "alert_client_errors", labels=[a["labels"] for a in errors], value=errors[0]["value"])
    assert len(errors) == 1 and float(errors[0]["value"]) > 1, errors
    wait("TraefikClientErrors quiet again", lambda: not firing(prom, "TraefikClientErrors"), 60)


def test_traefik_not_scraped_fires_when_its_job_has_no_target():
    """The scrape job loses its target (Traefik's file_sd file emptied, as a wrong path or a renamed job does):
    no `up` series at all, which TraefikDown cannot see; TraefikNotScraped fires, and is quiet once it is back."""
    assert firing(nas_prometheus(), "TraefikNotScraped") == []
    NAS.check_output("echo '[]' > %s/targets/traefik.json" % monitoring.NAS_DIR)
    try:
        gone = wait("TraefikNotScraped firing", lambda: firing(nas_prometheus(), "TraefikNotScraped"), 60)
        assert firing(nas_prometheus(), "TraefikDown") == []
    finally:
        traefik_target()
    adhoc.record("monitoring", "alert_not_scraped", labels=gone[0]["labels"])
    wait("TraefikNotScraped quiet again", lambda: not firing(nas_prometheus(), "TraefikNotScraped"), 60)


@upstream_images.needs("autoheal")
def test_a_wedge_fires_traefik_down_and_the_edge_symptoms_and_autoheal_tells_the_receiver(client):
    for net in NAS.check_output("docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "
                                "autoheal").split():
        NAS.run("docker network connect %s %s" % (net, monitoring.RECEIVER))
    NAS.check_output(": > %s" % monitoring.RECEIVED)

    def received():
        return NAS.file(monitoring.RECEIVED).content_string.strip()

    assert firing(nas_prometheus(), "TraefikDown") == []
    symptoms = ("EdgeSiteNotAnswering", "EdgeErrorBudgetBurn")
    seen = {}

    def look():  # the symptom alerts of the probes through the VPS, each the first time it fires
        for name in symptoms:
            seen[name] = seen.get(name) or firing(nas_prometheus(), name)
        return all(seen.values()) and len(seen) == len(symptoms)

    def healed():  # autoheal's message (looking at the symptom alerts meanwhile)
        look()
        return received()
    start = time.time()
    NAS.check_output("docker kill -s STOP traefik")
    # 6,000 connections at once from the LAN to the stopped Traefik: the kernel completes their handshakes
    # into its accept queue (somaxconn, 4,096 in its namespace) until it is full, then counts overflows there
    burst = ("import resource, socket, time\n"
             "resource.setrlimit(resource.RLIMIT_NOFILE, (8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
             "socks = []\n"
             "for i in range(6000):\n"
             "    s = socket.socket(); s.setblocking(False); s.connect_ex(('%s', 443)); socks.append(s)\n"
             "time.sleep(4)\n"
             "for s in socks:\n    s.close()\n" % hosts.address("lab-nas", "lab-lan"))
    client.containers.get("lab-lan-client").exec_run(["python3", "-c", burst], detach=True)
    try:
        # running and answering nothing: its scrape fails (up 0) before its health check gives up
        down = wait("TraefikDown firing on the wedge", lambda: firing(nas_prometheus(), "TraefikDown"), 60)
        got = wait("autoheal's message at the receiver", healed, 90)
        # the probes' window (20 s in the lab) lags the wedge: a symptom alert may fire as autoheal restarts it
        wait("the symptom alerts firing on the wedge", look, 30)
    finally:
        NAS.run("docker kill -s CONT traefik")
    adhoc.record("monitoring", "autoheal_webhook", message=" ".join(got.split())[:200],
                 traefik_down=[a["labels"]["instance"] for a in down],
                 symptoms=dict((k, [a["labels"] for a in v]) for k, v in seen.items()))
    assert "Container traefik" in got and "found to be unhealthy" in got and "Successfully restarted" in got
    wait("Traefik served again", lambda: NAS.run("curl -sk -o /dev/null -w '%{http_code}' --resolve "
                                                 "site.nas.lab:443:127.0.0.1 https://site.nas.lab/").stdout == "200", 60)
    traefik_target()  # re-created? its address for the next scrape
    wait("TraefikDown quiet once healed", lambda: not firing(nas_prometheus(), "TraefikDown"), 60)
    wait("the symptom alerts quiet once healed", lambda: not any(firing(nas_prometheus(), n) for n in symptoms), 90)
    # the connections the wedged Traefik's full accept queue turned away, in its own namespace (the tcp_drain
    # role's textfile): the alert fired during the wedge (Prometheus's record of it), and is quiet now
    overflowed = api(nas_prometheus(), "/api/v1/query", query='max_over_time(ALERTS{alertname="TcpListenQueueOverflowing",'
                     'alertstate="firing"}[%ds])' % (time.time() - start + 5))["result"]
    adhoc.record("monitoring", "alert_listen_overflows", labels=[r["metric"] for r in overflowed])
    assert [r["metric"].get("container") for r in overflowed] == ["traefik"], overflowed
    wait("TcpListenQueueOverflowing quiet once healed",
         lambda: not firing(nas_prometheus(), "TcpListenQueueOverflowing"), 60)
    FAULTS["edge"] = (start - 20, time.time() + 10)


def series(prom, expr, window, legend):
    """{legend: [(t, value)]} of a range query over the window, every 2 s (the lab's scrape interval)."""
    got = api(prom, "/api/v1/query_range", query=expr, start=window[0], end=window[1], step=2)["result"]
    return dict((legend(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in got)


@upstream_images.needs("autoheal")
def test_the_picture_of_both_faults_is_drawn_from_the_labs_prometheus():
    """The README's picture (docs/images/monitoring-faults.svg is a copy of tests/output/monitoring-faults.svg):
    the probes, Traefik's scrape and the UDP sessions against the budget, with each alert's firing time shaded,
    as the lab's two Prometheus servers recorded the faults above (a hung DNS server behind k3d's load balancer;
    a wedged Traefik healed by autoheal)."""
    if sorted(FAULTS) != ["edge", "k3d"]:
        pytest.skip("drawn only after both fault tests ran in this session")
    k3d_p, nas_p, w_k3d, w_edge = k3d_prometheus(), nas_prometheus(), FAULTS["k3d"], FAULTS["edge"]
    firing_spans = lambda prom, window, names: [  # noqa: E731
        (name, svgplot.intervals(pts, 2)) for name in names
        for pts in series(prom, 'ALERTS{alertname="%s",alertstate="firing"}' % name, window,
                          lambda m: "x").values()]
    k3d_lines = series(k3d_p, 'probe_success{job="blackbox-k3d",k3d_cluster="lab"}', w_k3d,
                       lambda m: "probe %s answered" % m.get("module", m.get("instance")))
    k3d_lines.update(series(k3d_p, 'homelab_edge_k3d_lb_udp_sessions{lb="k3d-lab-serverlb"} / on (lb) '
                                   'homelab_edge_k3d_lb_udp_session_budget', w_k3d, lambda m: "UDP sessions / budget"))
    edge_lines = series(nas_p, 'probe_success{job="blackbox-edge"}', w_edge, lambda m: "site through the VPS answered")
    edge_lines.update(series(nas_p, 'up{job="traefik"}', w_edge, lambda m: "Traefik scraped (up)"))
    panels = [
        {"title": "k3d: the DNS server behind the load balancer hung, then a DNS load (lab's k3d Prometheus)",
         "lines": sorted(k3d_lines.items()), "shaded": firing_spans(k3d_p, w_k3d, (
             "K3dLoadBalancerNotAnswering", "K3dLoadBalancerUdpSessionsNearBudget")), "t0": w_k3d[0], "t1": w_k3d[1]},
        {"title": "NAS: Traefik wedged (SIGSTOP) until autoheal restarts it (the NAS's Prometheus)",
         "lines": sorted(edge_lines.items()), "shaded": firing_spans(nas_p, w_edge, (
             "TraefikDown", "EdgeSiteNotAnswering", "EdgeErrorBudgetBurn", "TcpListenQueueOverflowing")),
         "t0": w_edge[0], "t1": w_edge[1]}]
    picture = svgplot.svg("homelab.edge alerts on the lab's two faults", panels, w_k3d[0], w_k3d[1],
                          note="drawn by molecule/default test_monitoring.py on %s from the lab's Prometheus; "
                               "seconds from 20 s before each fault" % time.strftime("%Y-%m-%d"))
    os.makedirs(os.path.join(ROOT, "tests", "output"), exist_ok=True)
    with open(os.path.join(ROOT, "tests", "output", "monitoring-faults.svg"), "w") as f:
        f.write(picture)
    with open(os.path.join(ROOT, "tests", "output", "monitoring-faults.json"), "w") as f:
        json.dump({"faults": FAULTS, "panels": panels}, f, indent=1)
    for panel in panels:
        assert all(pts for dummy, pts in panel["lines"]) and len(panel["lines"]) >= 2, panel["title"]
        assert [name for name, spans in panel["shaded"] if spans], panel["title"]  # an alert fired in it
    assert min(v for dummy, v in edge_lines["site through the VPS answered"]) == 0  # the wedge shows
    assert min(v for label, pts in k3d_lines.items() if label.startswith("probe") for dummy, v in pts) == 0
