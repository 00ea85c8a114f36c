"""The tunnel's total on the real Traefik (the lab's release binaries, v3 and v2), in a network namespace this test
makes: the static config as traefik_inflight's plan edits it (module_utils/traefik/tunnel.py), its dynamic file as the
module writes it, routes of a user's (one router on [websecure], one on [websecure, tunnel], one without
entryPoints), a backend that holds each request 2 s. Clients through the tunnel speak PROXY protocol from the
trusted address, as the VPS's nginx does, each with the client address it stands for; LAN clients connect to the
LAN's entrypoint from addresses of their own. What must hold, on both versions:

- a flood from many addresses through the tunnel gets `total` answered per router, the rest 429 at once; the same
  from the LAN is served whole (the total never counts the LAN);
- one address through the tunnel is still held to the per-client amount;
- a client's own X-Homelab-Edge-Pool header does not split the count;
- the router that lists only [websecure] answers 404 through the tunnel, and the module's API read-back names it.

Without the tunnel's entrypoint (the net removed: the VPS forwarding to the LAN's entrypoint, as before), the same
flood from many addresses is served whole. Only loopback addresses in the test's own namespace are used."""
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
__import__("conftest")  # tests/unit's: the collection importable as ansible_collections.homelab.edge
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight  # noqa: E402
from ansible_collections.homelab.edge.plugins.module_utils.traefik import tunnel as traefik_tunnel  # noqa: E402

BIN = os.path.join(os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge"), "bin")
VERSIONS = {3: "3.6.12", 2: "2.11.35"}
AMOUNT, TOTAL, TUNNEL_PORT, LAN_PORT = 3, 5, 10443, 8443
STATIC = """# the admin's static config
entryPoints:
  websecure:
    address: ":%d"
    http:
      tls: {}
  traefik:
    address: "127.0.0.1:8080"
api:
  insecure: true
providers:
  file:
    directory: %%s
    watch: true
log:
  level: ERROR
""" % LAN_PORT
ROUTES = {"http": {"routers": {
    "lan-only": {"rule": "Host(`lan-only.lab`)", "entryPoints": ["websecure"], "service": "slow", "tls": {}},
    "both": {"rule": "Host(`both.lab`)", "entryPoints": ["websecure", "tunnel"], "service": "slow", "tls": {}},
    "all": {"rule": "Host(`all.lab`)", "service": "slow", "tls": {}}},
    "services": {"slow": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9000"}]}}}}}
BACKEND = ("import http.server, socketserver, time\n"
           "class H(http.server.BaseHTTPRequestHandler):\n"
           "    def do_GET(self):\n        time.sleep(2)\n        self.send_response(200); self.end_headers(); "
           "self.wfile.write(b'ok')\n    def log_message(self, *a): pass\n"
           "class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True\n"
           "S(('127.0.0.1', 9000), H).serve_forever()\n")
OPTS = {"name": "inflight-limit", "amount": AMOUNT, "entrypoints": ["websecure"], "tunnel_total": TOTAL,
        "tunnel_entrypoint": "tunnel", "tunnel_port": TUNNEL_PORT, "tunnel_publish_address": "",
        "proxy_protocol_trusted_ips": ["127.0.0.1/32"], "verify_api": False}


def request(port, host, source, proxied=None, header=None, timeout=10):
    """One HTTPS GET, its status (or the error's name): from `source`, with a PROXY v1 line for `proxied` first."""
    try:
        raw = socket.socket()
        raw.settimeout(timeout)
        raw.bind((source, 0))
        raw.connect(("127.0.0.1", port))
        if proxied:
            raw.sendall(("PROXY TCP4 %s 127.0.0.1 40000 %d\r\n" % (proxied, port)).encode())
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        tls = ctx.wrap_socket(raw, server_hostname=host)
        extra = "%s: %s\r\n" % (traefik_tunnel.HEADER, header) if header else ""
        tls.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (host, extra)).encode())
        status = tls.recv(64).split(b" ")[1].decode()
        tls.close()
        return status
    except (OSError, IndexError) as e:
        return type(e).__name__


def at_once(calls):
    """Run the requests together; their statuses, sorted."""
    out = [None] * len(calls)

    def one(i, call):
        out[i] = request(*call[0], **call[1])
    threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return sorted(str(x) for x in out)


def api(path):
    return json.load(urllib.request.urlopen("http://127.0.0.1:8080/api/http/" + path, timeout=5))


def run_in(netns, fn, *args):
    """Run fn in the network namespace: this thread alone joins it (setns(2); the threads it starts inherit it)."""
    import ctypes
    fd = os.open("/run/netns/" + netns, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(fd)
    return fn(*args)


def start(major, tmp_path, with_tunnel):
    binary = os.path.join(BIN, "traefik-v" + VERSIONS[major])
    if os.geteuid() != 0 or not os.path.exists(binary) or not shutil.which("ip"):
        pytest.skip("needs root, iproute2 and the lab's Traefik binaries (%s)" % binary)
    dyn = tmp_path / "dynamic"
    dyn.mkdir()
    static = STATIC % dyn
    opts = dict(OPTS, provider={"kind": "directory", "dir": str(dyn)}, version=VERSIONS[major],
                tunnel_total=TOTAL if with_tunnel else 0)
    changes = traefik_inflight.static_changes(yaml.safe_load(static), opts)
    (tmp_path / "traefik.yml").write_text(traefik_inflight.edit_static(static, changes, str(tmp_path / "traefik.yml")))
    (dyn / "inflight-limit.yml").write_text(traefik_inflight.dynamic_text(opts))
    routes = json.loads(json.dumps(ROUTES))
    if not with_tunnel:
        routes["http"]["routers"]["both"]["entryPoints"] = ["websecure"]
    (dyn / "routes.yml").write_text(yaml.safe_dump(routes))
    return binary


@pytest.mark.parametrize("major", [3, 2])
def test_the_tunnels_total_holds_many_addresses_and_never_the_lan(major, tmp_path):
    binary = start(major, tmp_path, True)
    got = run_netns(binary, tmp_path, scenario_with_tunnel)
    many = ["200"] * TOTAL + ["429"] * 3
    assert got["tunnel_many"] == sorted(many), got
    assert got["lan_many"] == ["200"] * 8, got
    assert got["tunnel_one"] == sorted(["200"] * AMOUNT + ["429"] * 5), got
    assert got["tunnel_own_header"] == sorted(many), got    # their own pool headers do not split the count
    # through the tunnel, a router listing only [websecure] is not there; the others are, each with its own total
    assert (got["lan_only_through_tunnel"], got["all_through_tunnel"]) == ("404", "200"), got
    assert got["routers"] == {"through": ["all@file", "both@file"], "missing": ["lan-only@file"]}, got
    assert got["problems"] == [], got


@pytest.mark.parametrize("major", [3, 2])
def test_without_the_tunnels_entrypoint_many_addresses_pass(major, tmp_path):
    binary = start(major, tmp_path, False)
    got = run_netns(binary, tmp_path, scenario_without_tunnel)
    assert got["lan_entrypoint_many"] == ["200"] * 8, got


def scenario_with_tunnel():
    out = {}
    sources = ["203.0.113.%d" % (i + 1) for i in range(8)]
    out["tunnel_many"] = at_once([((TUNNEL_PORT, "both.lab", "127.0.0.1"), {"proxied": s}) for s in sources])
    out["lan_many"] = at_once([((LAN_PORT, "both.lab", "127.0.1.%d" % (i + 1)), {}) for i in range(8)])
    out["tunnel_one"] = at_once([((TUNNEL_PORT, "both.lab", "127.0.0.1"), {"proxied": "203.0.113.99"})] * 8)
    out["tunnel_own_header"] = at_once([((TUNNEL_PORT, "both.lab", "127.0.0.1"), {"proxied": s, "header": s})
                                        for s in sources])
    out["lan_only_through_tunnel"] = request(TUNNEL_PORT, "lan-only.lab", "127.0.0.1", proxied="203.0.113.50")
    out["all_through_tunnel"] = request(TUNNEL_PORT, "all.lab", "127.0.0.1", proxied="203.0.113.51")
    routers, mws = api("routers"), api("middlewares")
    out["routers"] = traefik_tunnel.routers(routers, ["websecure"], "tunnel")
    out["problems"] = traefik_tunnel.check(routers, mws, "tunnel", "inflight-limit", TOTAL)
    return out


def scenario_without_tunnel():
    # as before the tunnel had its entrypoint: the VPS forwards to the LAN's, PROXY protocol trusted there
    sources = ["203.0.113.%d" % (i + 1) for i in range(8)]
    return {"lan_entrypoint_many": at_once([((LAN_PORT, "both.lab", "127.0.0.1"), {"proxied": s}) for s in sources])}


def run_netns(binary, tmp_path, scenario):
    ns = "hle-tt-" + uuid.uuid4().hex[:6]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    procs = []
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", "127.0.1.1/24", "dev", "lo"], check=True)
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", BACKEND]))
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, binary, "--configFile=%s" % (tmp_path / "traefik.yml")],
                                      stdout=open(tmp_path / "traefik.log", "w"), stderr=subprocess.STDOUT))
        result = {}

        def body():
            end = time.time() + 30
            while time.time() < end:
                try:
                    # a router on two entrypoints with middlewares shows as <entrypoint>-<name>
                    names = [r["name"] for r in api("routers")]
                    if [n for n in names if n.endswith("all@file")] and \
                            "inflight-limit@file" in [m["name"] for m in api("middlewares")]:
                        break
                except OSError:
                    pass
                time.sleep(0.3)
            result.update(scenario())
        t = threading.Thread(target=run_in, args=(ns, body))
        t.start()
        t.join(120)
        return result
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        subprocess.run(["ip", "netns", "del", ns], check=False)
