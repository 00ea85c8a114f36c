"""The bounds on all sources together that ufw_connlimit writes (module_utils/ufw/total.py), on the real iptables
(nf_tables) in two network namespaces this test makes: a client that owns a /24 of source addresses (AnyIP: a local
route on lo) and a VPS whose chain holds the block's rules exactly as render_block writes them, behind an
ESTABLISHED accept as ufw has it, in front of a listener that keeps every connection. Many sources with a few
connections each: the per-address limit alone lets every one through (the net removed); the total holds the
count, the rate bound holds new connections a second, each refusing with a TCP reset. Only these namespaces'
addresses are used; every connection is bounded in time and closed."""
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins"))
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402

PORT, LIMIT = 8443, 100
CLIENT_IP, VPS_IP, SOURCES = "10.78.1.2", "10.78.1.1", "10.201.0.%d"
SERVER = ("import socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', %d)); s.listen(4096)\nheld = []\nend = time.time() + 120\n"
          "s.settimeout(0.5)\nwhile time.time() < end:\n    try:\n        held.append(s.accept()[0])\n"
          "    except OSError:\n        pass\n" % PORT)
HOLD = ("import sys, json; sys.path.insert(0, %r); from module_utils.prove import net as prove_net\n"
        "sources = ['%s' %% (i + 1) for i in range(int(sys.argv[1]))]\n"
        "c = prove_net.hold(%r, %d, len(sources) * int(sys.argv[2]), 5.0, 0.5, sources=sources)\n"
        "print(json.dumps(c))" % (os.path.join(ROOT, "plugins"), SOURCES, VPS_IP, PORT))


def ip(*argv):
    subprocess.run(["ip"] + list(argv), check=True, capture_output=True, timeout=30)


def nx(ns, *argv, **kw):
    return subprocess.run(["ip", "netns", "exec", ns] + list(argv), capture_output=True, text=True, timeout=60, **kw)


@pytest.fixture
def path():
    if os.geteuid() != 0 or not shutil.which("iptables") or not shutil.which("ip"):
        pytest.skip("needs root, iptables and iproute2")
    tag = uuid.uuid4().hex[:6]
    client, vps = "hle-tc-" + tag, "hle-tv-" + tag
    for ns in (client, vps):
        ip("netns", "add", ns)
    server = None
    try:
        ip("link", "add", "c" + tag, "netns", client, "type", "veth", "peer", "name", "v" + tag, "netns", vps)
        for ns, dev, addr in ((client, "c" + tag, CLIENT_IP), (vps, "v" + tag, VPS_IP)):
            ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        # the client owns 10.201.0.0/24 (AnyIP); the VPS routes it back through the client
        ip("-n", client, "route", "add", "local", "10.201.0.0/24", "dev", "lo")
        ip("-n", vps, "route", "add", "10.201.0.0/24", "via", CLIENT_IP)
        server = subprocess.Popen(["ip", "netns", "exec", vps, sys.executable, "-c", SERVER])
        yield {"client": client, "vps": vps}
    finally:
        if server:
            server.kill()
            server.wait(10)
        for ns in (client, vps):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def load(vps, bounds):
    """ufw's shape: ESTABLISHED accepted first, then the block's rules in ufw-before-input (IPv4)."""
    block = ufw_connlimit.render_block(4, [PORT], LIMIT, bounds=bounds)
    rules = "*filter\n:ufw-before-input - [0:0]\n-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" \
            "-A INPUT -j ufw-before-input\n%s\nCOMMIT\n" % "\n".join(block)
    nx(vps, "iptables-restore", input=rules, check=True)


def flood(client, sources, each):
    import json
    out = nx(client, sys.executable, "-c", HOLD, str(sources), str(each), check=True).stdout
    return json.loads(out)


def wait_listening(client):
    end = time.time() + 10
    while time.time() < end:
        if nx(client, sys.executable, "-c", "import socket; socket.create_connection((%r, %d), 1).close()"
              % (VPS_IP, PORT)).returncode == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the listener never answered")


def test_without_the_bounds_many_sources_pass_the_per_address_limit(path):
    load(path["vps"], None)
    wait_listening(path["client"])
    got = flood(path["client"], 150, 2)
    assert (got["established"], got["reset"], got["timeout"], got["other"]) == (300, 0, 0, 0), got


def test_the_total_holds_the_count_of_all_sources_together(path):
    load(path["vps"], {"total": 120, "rate": 0, "burst": 1})
    wait_listening(path["client"])
    got = flood(path["client"], 150, 2)
    assert got["established"] <= 120 and got["established"] >= 110, got
    assert got["reset"] == 300 - got["established"] and got["timeout"] == 0, got


def test_the_rate_bound_holds_new_connections_a_second(path):
    load(path["vps"], {"total": 0, "rate": 20, "burst": 20})
    wait_listening(path["client"])
    time.sleep(1.5)  # the bucket refills after the probe above (20 a second)
    got = flood(path["client"], 150, 1)
    # one bucket of 20 for every source: about 20 pass (a few more refill while the 150 go out), the rest reset
    assert 20 <= got["established"] <= 30 and got["reset"] == 150 - got["established"], got



def test_a_pause_does_not_give_the_whole_burst_back(path):
    """The bucket refills at the rate, no sooner: its entry outlives the last connection by burst / rate seconds
    (total.expire_ms). iptables' own expiry is about one token's time, after which the next connection finds a full
    bucket again (the net removed: a flood pausing a second would get the whole burst each time)."""
    load(path["vps"], {"total": 0, "rate": 4, "burst": 20})
    wait_listening(path["client"])
    first = flood(path["client"], 30, 1)
    assert 18 <= first["established"] <= 22, first
    time.sleep(1.5)   # 6 tokens back at 4 a second
    second = flood(path["client"], 30, 1)
    assert 4 <= second["established"] <= 9, second
