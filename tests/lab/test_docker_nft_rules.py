"""The nftables table ufw_connlimit hands over under Docker's nftables
firewall backend (module_utils/ufw_connlimit.py docker_nft_rules), on the
real nft in three network namespaces this test makes: a client, a VPS that
DNATs a published port to a container's address (as Docker's nftables
backend does: dstnat in prerouting, then forward), and the container. With
the table, one client holds the limit and the rest are reset; without it,
every connection gets through (the net removed). Only these namespaces'
addresses are used."""
import os
import shutil
import subprocess
import sys
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins"))
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402

PUBLISHED, CONTAINER_PORT, LIMIT, EXTRA = 8443, 8443, 10, 5  # the same port: only DNAT tells them apart
CLIENT_IP, VPS_OUT, VPS_IN, CONTAINER_IP = "10.77.1.2", "10.77.1.1", "10.77.2.1", "10.77.2.2"
# what Docker's nftables backend does for a published port: DNAT in prerouting (its own table)
DNAT = """table ip docker-standin {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    tcp dport %d dnat to %s:%d
  }
}
""" % (PUBLISHED, CONTAINER_IP, CONTAINER_PORT)
SERVER = ("import socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', %d)); s.listen(1024)\nheld = []\nend = time.time() + 60\n"
          "s.settimeout(0.5)\nwhile time.time() < end:\n    try:\n        held.append(s.accept()[0])\n"
          "    except OSError:\n        pass\n" % CONTAINER_PORT)
COUNT = ("import sys; sys.path.insert(0, %r); from module_utils.prove import net as prove_net; c = prove_net.hold(sys.argv[1], %d, %d, 3.0, 0.5); "
         "print(c['established'], c['reset'], c['timeout'])"
         % (os.path.join(ROOT, "plugins"), PUBLISHED, LIMIT + EXTRA))


def ip(*argv):
    subprocess.run(["ip"] + list(argv), check=True, capture_output=True, timeout=30)


def nx(ns, *argv, **kw):
    return subprocess.run(["ip", "netns", "exec", ns] + list(argv), capture_output=True, text=True, timeout=60, **kw)


@pytest.fixture
def path():
    if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"):
        pytest.skip("needs root, nft and iproute2")
    tag = uuid.uuid4().hex[:6]
    client, vps, box = ("hle-c-" + tag, "hle-v-" + tag, "hle-b-" + tag)
    for ns in (client, vps, box):
        ip("netns", "add", ns)
    server = None
    try:
        ip("link", "add", "c" + tag, "netns", client, "type", "veth", "peer", "name", "vc" + tag, "netns", vps)
        ip("link", "add", "b" + tag, "netns", box, "type", "veth", "peer", "name", "vb" + tag, "netns", vps)
        for ns, dev, addr in ((client, "c" + tag, CLIENT_IP), (vps, "vc" + tag, VPS_OUT),
                              (vps, "vb" + tag, VPS_IN), (box, "b" + tag, CONTAINER_IP)):
            ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", client, "route", "add", "default", "via", VPS_OUT)
        ip("-n", box, "route", "add", "default", "via", VPS_IN)
        nx(vps, "sysctl", "-qw", "net.ipv4.ip_forward=1", check=True)
        nx(vps, "nft", "-f", "-", input=DNAT, check=True)
        server = subprocess.Popen(["ip", "netns", "exec", box, sys.executable, "-c", SERVER])
        yield {"client": client, "vps": vps}
    finally:
        if server:
            server.kill()
            server.wait(10)
        for ns in (client, vps, box):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def counts(client, to=VPS_OUT):
    """limit + extra connections at once from the client to port PUBLISHED at `to` (the VPS: published, DNATed;
    the container's own address: routed through the VPS, no DNAT)."""
    out = nx(client, sys.executable, "-c", COUNT, to, check=True).stdout.split()
    return dict(zip(("established", "reset", "timeout"), map(int, out)))


def wait_listening(client):
    for dummy in range(50):
        if nx(client, sys.executable, "-c", "import socket; socket.create_connection((%r, %d), 1).close()"
              % (VPS_OUT, PUBLISHED)).returncode == 0:
            return
        subprocess.run(["sleep", "0.1"], check=True)
    raise AssertionError("the container's port never answered through the DNAT")


def test_the_table_holds_one_client_at_the_limit_on_a_dnat_port(path):
    rules = ufw_connlimit.docker_nft_rules([PUBLISHED], LIMIT)
    assert nx(path["vps"], "nft", "-c", "-f", "-", input=rules).returncode == 0  # what the refusal hands over parses
    nx(path["vps"], "nft", "-f", "-", input=rules, check=True)
    wait_listening(path["client"])
    got = counts(path["client"])
    assert got["established"] <= LIMIT and got["reset"] >= EXTRA and got["timeout"] == 0, got
    # traffic the VPS only routes (a WireGuard peer's, say) to the same port is not Docker's: not limited
    assert counts(path["client"], CONTAINER_IP) == {"established": LIMIT + EXTRA, "reset": 0, "timeout": 0}
    # loaded again (a second run, a reload): the table is replaced, not doubled
    nx(path["vps"], "nft", "-f", "-", input=rules, check=True)
    listed = nx(path["vps"], "nft", "list", "table", "inet", ufw_connlimit.DOCKER_NFT_TABLE, check=True).stdout
    assert listed.count("ct count over %d" % LIMIT) == rules.count("ct count over %d" % LIMIT) == 2, listed  # IPv4, IPv6


def test_without_the_table_every_connection_gets_through(path):
    wait_listening(path["client"])
    got = counts(path["client"])
    assert got == {"established": LIMIT + EXTRA, "reset": 0, "timeout": 0}, got
