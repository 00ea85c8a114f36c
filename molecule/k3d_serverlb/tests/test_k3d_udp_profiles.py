"""UDP profiles per port on a real k3d load balancer (issue 53): a DNS port and
a tunnel-shaped UDP service (each datagram answered with 3 datagrams at once
and one more 1 s later, as a WireGuard or QUIC server does) through the same
fixed load balancer. Every datagram of the tunnel is delivered while DNS stays
fixed; run both ways: the same test with every UDP port on proxy_responses 1
(the fix before the profiles) loses the tunnel's datagrams. The keeper applies
the same profiles to a load balancer k3d re-creates, and a real WireGuard
(wireguard-go) handshakes and pings through it."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"),
                os.path.join(ROOT, "plugins"), os.path.dirname(__file__)]
import adhoc  # noqa: E402
import k3d  # noqa: E402
import keeper_library  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
import lb_check  # noqa: E402
import probes  # noqa: E402
import test_k3d_serverlb as base  # noqa: E402  (the shared DNS load)

CLUSTER, BASE = "molu", 30600
TUNNEL, WG = 51820, 51821
PROFILES = {53: "dns", 1053: "dns", TUNNEL: "stream", WG: "stream"}
WANT = dict(k3d_fix.DEFAULTS, udp_ports=PROFILES)
# each datagram: 3 replies at once and one a second later, from the same socket (one 5-tuple, as a tunnel)
SERVICE = """
import socket, threading
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", %d))
while True:
    data, peer = s.recvfrom(2048)
    for i in range(3):
        s.sendto(data + b" reply %%d" %% i, peer)
    threading.Timer(1.0, s.sendto, (data + b" late", peer)).start()
""" % TUNNEL
SENT = 5
EXPECTED = SENT * 4
WG_IMAGE = "homelab-edge/host:lab"
WG_SERVER, WG_CLIENT = "homelab-edge-molu-wg-server", "homelab-edge-molu-wg-client"


@pytest.fixture(scope="module")
def client():
    c = docker.from_env()
    k3d.delete(CLUSTER)
    k3d.create(CLUSTER, BASE, extra=["-p", "127.0.0.1:%d:%d/udp@loadbalancer" % (BASE + 20, TUNNEL),
                                     "-p", "127.0.0.1:%d:%d/udp@loadbalancer" % (BASE + 21, WG)])
    k3d.wait_serving(c, CLUSTER)
    start_service(c)
    yield c
    for name in (WG_SERVER, WG_CLIENT):
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    k3d.delete(CLUSTER)


def start_service(client):
    server = client.containers.get(k3d.server_name(CLUSTER))
    server.exec_run(["python3", "-c", SERVICE], detach=True)
    deadline = time.time() + 60  # until it is bound (bounded)
    while ":%04X " % TUNNEL not in server.exec_run(["cat", "/proc/net/udp"]).output.decode():
        assert time.time() < deadline, "the tunnel's stand-in did not bind udp %d" % TUNNEL
        time.sleep(0.2)


def lb_address(client):
    c = client.containers.get(k3d.lb_name(CLUSTER))
    return c.attrs["NetworkSettings"]["Networks"][k3d.NETWORK]["IPAddress"]


def tunnel_exchange(address, port=TUNNEL, sent=SENT, gap=0.3, tail=2.5):
    """Datagrams received for `sent` datagrams from one socket (one session, as a tunnel's peer)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.05)
    got = []
    try:
        for i in range(sent):
            s.sendto(b"ping %d" % i, (address, port))
            until = time.time() + gap
            while time.time() < until:
                try:
                    got.append(s.recv(2048))
                except socket.timeout:
                    pass
        until = time.time() + tail
        while time.time() < until:
            try:
                got.append(s.recv(2048))
            except socket.timeout:
                pass
    finally:
        s.close()
    return len(got)


def fix(udp_ports, check=False):
    res = adhoc.run_module("k3d_serverlb", {"clusters": [CLUSTER], "udp_ports": udp_ports}, check=check)
    assert not res.get("failed"), res.get("msg")
    return res


def profiles_of(res):
    return dict((p["port"], (p["profile"], p["live"])) for p in res["load_balancers"][0]["udp_profiles"])


def test_stock_k3d_delivers_every_datagram_of_the_tunnel(client):
    assert tunnel_exchange(lb_address(client)) == EXPECTED


def test_the_fix_keeps_every_datagram_of_the_tunnel_and_dns_fixed_beside_it(client):
    res = fix(PROFILES)
    entry = res["load_balancers"][0]
    assert res["changed"] and entry["state"] == "fixed"
    assert profiles_of(res) == {"53": ("dns", "dns"), "1053": ("dns", "dns"), str(TUNNEL): ("stream", "stream"),
                                str(WG): ("stream", "stream")}
    assert "%d/udp stream: sessions stay open" % TUNNEL in entry["udp_profiles_text"]
    c = client.containers.get(k3d.lb_name(CLUSTER))
    assert lb_check.shortfalls(c, WANT) == []  # judged from outside: dns ports proxy_responses 1, 5 s; the rest not
    delivered = tunnel_exchange(lb_address(client))
    dns, https, alerts = base.under_load(c, BASE, rate=300, count=9000)
    adhoc.record("k3d_serverlb", "udp_profiles", tunnel_delivered=delivered, tunnel_expected=EXPECTED,
                 dns_sent=dns["sent"], dns_answered=dns["answered"], alerts=alerts, https_failed=https["failed"])
    assert delivered == EXPECTED
    assert dns["sent"] == dns["answered"] == 9000 and alerts == 0
    assert https["ok"] > 0 and https["failed"] == 0
    again = fix(PROFILES, check=True)
    assert not again["changed"]


def test_both_ways_every_udp_port_on_proxy_responses_loses_the_tunnels_datagrams(client):
    """The fix before the profiles (every UDP port a dns port): the same exchange loses what the server sends
    after its first reply. Then the profiles again: every datagram back."""
    every_port_dns = dict(PROFILES)
    every_port_dns.update({TUNNEL: "dns", WG: "dns"})
    assert fix(every_port_dns)["changed"]
    c = client.containers.get(k3d.lb_name(CLUSTER))
    assert lb_check.nginx_conf.summary(lb_check.read(c, lb_check.NGINX_CONF))["udp"][str(TUNNEL)]["proxy_responses"] == "1"
    cut = tunnel_exchange(lb_address(client))
    check = fix(PROFILES, check=True)
    reasons = check["load_balancers"][0]["reasons"]
    restored = fix(PROFILES)
    delivered = tunnel_exchange(lb_address(client))
    adhoc.record("k3d_serverlb", "udp_profiles_both_ways", every_port_dns_delivered=cut, profiles_delivered=delivered,
                 expected=EXPECTED)
    assert cut < EXPECTED
    assert check["changed"] and any(r.startswith("UDP %d (stream): proxy_responses 1" % TUNNEL) for r in reasons), reasons
    assert restored["changed"] and delivered == EXPECTED


def test_an_undeclared_udp_port_is_stream_with_a_warning_naming_it(client):
    res = fix({53: "dns", 1053: "dns", WG: "stream"})
    entry = res["load_balancers"][0]
    assert entry["udp_ports_undeclared"] == [str(TUNNEL)]
    assert profiles_of(res)[str(TUNNEL)] == ("stream", "stream")
    warnings = [w for w in entry["warnings"] if "%d/udp" % TUNNEL in w]  # the module warns each of them
    assert warnings and "k3d_serverlb_udp_ports" in warnings[0] and "{%d: stream}" % TUNNEL in warnings[0], entry["warnings"]
    assert tunnel_exchange(lb_address(client)) == EXPECTED


def test_the_keeper_gives_a_recreated_load_balancer_the_same_profiles(client):
    fix(PROFILES)
    cfg_path = os.path.join(tempfile.mkdtemp(), "keeper-molu.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(WANT, clusters=[CLUSTER], names=[], render_timeout=30), f)
    lib = os.path.dirname(cfg_path)
    keeper = keeper_library.install(lib)
    subprocess.run([sys.executable, keeper, "--config", cfg_path, "--daemon"], check=True, capture_output=True)
    try:
        old = client.containers.get(k3d.lb_name(CLUSTER)).id
        k3d.port_add(CLUSTER, "127.0.0.1:%d:853/udp@loadbalancer" % (BASE + 85))
        deadline, fixed = time.time() + 60, None
        while time.time() < deadline and not fixed:
            try:
                c = client.containers.get(k3d.lb_name(CLUSTER))
                if c.id != old and not lb_check.shortfalls(c, WANT):
                    fixed = c
            except (docker.errors.NotFound, docker.errors.APIError, AssertionError, ValueError, KeyError):
                pass
            time.sleep(1)
        assert fixed, "the keeper did not give the recreated load balancer its profiles"
        udp = lb_check.nginx_conf.summary(lb_check.read(fixed, lb_check.NGINX_CONF))["udp"]
        assert udp["53"]["proxy_responses"] == "1" and udp[str(TUNNEL)]["proxy_responses"] is None
        assert udp["853"]["proxy_responses"] is None  # undeclared: stream
        assert tunnel_exchange(lb_address(client)) == EXPECTED
    finally:
        subprocess.run([sys.executable, keeper, "--config", cfg_path, "--stop"], check=False, capture_output=True)
    with open("/var/log/homelab-edge-%s-keeper.log" % os.path.splitext(os.path.basename(cfg_path))[0]) as f:
        log = f.read()
    assert "%d/udp stream" % TUNNEL in log and "853/udp" in log  # the profiles, and the undeclared port's warning


def sh(*argv, check=True, timeout=60):
    out = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError("%s: rc=%d %s %s" % (" ".join(argv), out.returncode, out.stdout[-500:], out.stderr[-1000:]))
    return out


@pytest.mark.skipif(subprocess.run(["docker", "image", "inspect", WG_IMAGE], capture_output=True).returncode != 0,
                    reason="no %s image (lab/lab.sh builds it): no wireguard-go" % WG_IMAGE)
def test_a_real_wireguard_peer_handshakes_and_pings_through_the_fixed_load_balancer(client):
    """wireguard-go (userspace) in the server node's network namespace on 51821, its peer on the k3d network
    dialling the load balancer: handshake and ping over the tunnel, DNS beside it still fixed."""
    c = client.containers.get(k3d.lb_name(CLUSTER))
    assert not lb_check.shortfalls(c, WANT)
    for name, net in ((WG_SERVER, "container:%s" % k3d.server_name(CLUSTER)), (WG_CLIENT, k3d.NETWORK)):
        sh("docker", "rm", "-f", name, check=False)
        sh("docker", "run", "-d", "--name", name, "--privileged", "--network", net, "--entrypoint", "sleep", WG_IMAGE,
           "infinity")
    keys = {}
    for name in (WG_SERVER, WG_CLIENT):
        private = sh("docker", "exec", name, "wg", "genkey").stdout.strip()
        public = subprocess.run(["docker", "exec", "-i", name, "wg", "pubkey"], input=private + "\n",
                                capture_output=True, text=True, check=True).stdout.strip()
        keys[name] = (private, public)
    conf = {
        WG_SERVER: "[Interface]\nAddress = 10.77.0.1/24\nListenPort = %d\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\n"
                   "AllowedIPs = 10.77.0.2/32\n" % (WG, keys[WG_SERVER][0], keys[WG_CLIENT][1]),
        WG_CLIENT: "[Interface]\nAddress = 10.77.0.2/24\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nEndpoint = %s:%d\n"
                   "AllowedIPs = 10.77.0.1/32\nPersistentKeepalive = 5\n" % (keys[WG_CLIENT][0], keys[WG_SERVER][1],
                                                                             lb_address(client), WG),
    }
    for name in (WG_SERVER, WG_CLIENT):
        subprocess.run(["docker", "exec", "-i", name, "sh", "-c",
                        "umask 077; mkdir -p /etc/wireguard; cat > /etc/wireguard/wg0.conf"],
                       input=conf[name], capture_output=True, text=True, check=True)
        sh("docker", "exec", "-e", "WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", name, "wg-quick", "up", "wg0")
    ping = sh("docker", "exec", WG_CLIENT, "ping", "-c", "5", "-i", "0.5", "-W", "2", "10.77.0.1", check=False)
    handshake = sh("docker", "exec", WG_CLIENT, "wg", "show", "wg0", "latest-handshakes").stdout.split()
    # the server pings back through the tunnel: traffic the server starts, not a reply
    back = sh("docker", "exec", WG_SERVER, "ping", "-c", "3", "-W", "2", "10.77.0.2", check=False)
    dns = probes.dns_load("127.0.0.1", k3d.endpoints(BASE)["dns"][:1], rate=50, count=200)
    adhoc.record("k3d_serverlb", "wireguard_through_lb", ping_rc=ping.returncode, back_rc=back.returncode,
                 dns_answered=dns["answered"])
    assert len(handshake) == 2 and int(handshake[1]) > 0, handshake
    assert ping.returncode == 0, ping.stdout  # replies through the tunnel (the first may wait for the handshake)
    assert back.returncode == 0, back.stdout
    assert dns["answered"] == 200


def test_a_flood_on_the_tunnel_port_stays_inside_the_udp_budget(client):
    """Stream sessions are held until the stream timeout, so a flood of fresh source ports on the tunnel port fills
    the UDP session budget - and no more: HTTPS and the API through the same load balancer keep answering and nginx
    never runs out of connections. (Last: the held sessions take the budget from DNS too until they time out; the
    load balancer is restarted after.)"""
    c = client.containers.get(k3d.lb_name(CLUSTER))
    ep = k3d.endpoints(BASE)
    flood, tcp, alerts = probes.dns_under_load(c, lb_address(client), [TUNNEL], [ep["https"], ep["api"]],
                                               rate=400, count=6000)
    adhoc.record("k3d_serverlb", "udp_profiles_stream_flood", sent=flood["sent"], alerts=alerts,
                 https_ok=tcp["ok"], https_failed=tcp["failed"])
    assert flood["sent"] > 2 * WANT["worker_connections"] * WANT["udp_share"] // 200  # well past the budget
    assert alerts == 0
    assert tcp["ok"] > 0 and tcp["failed"] == 0
    k3d.restart_lb(client, CLUSTER)
