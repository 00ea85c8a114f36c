"""A container's own TCP counters (its network namespace's /proc/PID/net files) as textfile metrics."""
import os
import shutil
import stat
import subprocess
import sys

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import netns_sockets

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")

SOCKSTAT = """sockets: used 186
TCP: inuse 7 orphan 2 tw 9000 alloc 12 mem 3
UDP: inuse 3 mem 1
"""
SNMP = """Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 12345
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs
Tcp: 1 200 120000 -1 40 15000 0 1 5 99999
"""
NETSTAT = """TcpExt: SyncookiesSent ListenOverflows ListenDrops
TcpExt: 0 321 330
IpExt: InNoRoutes
IpExt: 0
"""


def samples(text):
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_the_counters_are_read_from_the_three_files():
    got = netns_sockets.sample({"sockstat": SOCKSTAT, "snmp": SNMP, "netstat": NETSTAT})
    assert got == {"homelab_edge_netns_tcp_time_wait": 9000, "homelab_edge_netns_tcp_orphans": 2,
                   "homelab_edge_netns_tcp_established": 5, "homelab_edge_netns_tcp_passive_opens_total": 15000,
                   "homelab_edge_netns_tcp_listen_overflows_total": 321, "homelab_edge_netns_tcp_listen_drops_total": 330}


def test_a_field_the_kernel_lacks_is_left_out_and_a_torn_file_refused():
    assert netns_sockets.sample({"sockstat": "TCP: inuse 1\n", "snmp": "", "netstat": ""}) == {}
    with pytest.raises(ValueError):
        netns_sockets.parse_pairs("Tcp: A B\nIp: 1 2\n")


def test_the_textfile_has_each_container_and_says_which_are_not_running():
    got = samples(netns_sockets.text({"traefik": netns_sockets.sample({"sockstat": SOCKSTAT, "snmp": SNMP, "netstat": NETSTAT}),
                                      'odd"name': None}, 1700000000))
    assert got['homelab_edge_netns_up{container="traefik"}'] == "1"
    assert got['homelab_edge_netns_up{container="odd\\"name"}'] == "0"
    assert got['homelab_edge_netns_tcp_time_wait{container="traefik"}'] == "9000"
    assert got['homelab_edge_netns_tcp_passive_opens_total{container="traefik"}'] == "15000"
    assert not [k for k in got if 'odd' in k and not k.startswith("homelab_edge_netns_up")]
    assert got["homelab_edge_netns_last_write_timestamp_seconds"] == "1700000000"
    kinds = [ln.split()[3] for ln in netns_sockets.text({}, 0).splitlines() if ln.startswith("# TYPE")]
    assert kinds.count("counter") == 3 and "untyped" not in kinds


def passive_opens():
    with open("/proc/%d/net/snmp" % os.getpid()) as f:
        return netns_sockets.parse_pairs(f.read())["Tcp:"]["PassiveOpens"]


def test_the_writer_reads_the_namespace_of_the_containers_pid(tmp_path):
    """As the role installs it (the writer beside netns_sockets.py), with a docker CLI that names this
    test's own PID as the container's: the textfile holds this process's namespace's counters."""
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(os.path.join(ROOT, "roles", "tcp_drain", "files", "homelab-edge-netns-sockets.py"), str(lib))
    shutil.copy(os.path.join(ROOT, "plugins", "module_utils", "netns_sockets.py"), str(lib))
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    # `docker inspect` of a running "traefik" and a missing "gone" (docker exits 1 after printing the others)
    fake.write_text("#!/bin/sh\necho '/traefik true %d'\necho 'Error: No such object: gone' >&2\nexit 1\n" % os.getpid())
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "textfile"
    env = dict(os.environ, PATH="%s:%s" % (fake.parent, os.environ["PATH"]))
    before = passive_opens()
    res = subprocess.run([sys.executable, str(lib / "homelab-edge-netns-sockets.py"), "--dir", str(out), "traefik", "gone"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    got = samples((out / netns_sockets.FILE).read_text())
    assert got['homelab_edge_netns_up{container="traefik"}'] == "1" and got['homelab_edge_netns_up{container="gone"}'] == "0"
    # the namespace's counter keeps growing while other programs accept: bounded by a read before and after
    assert before <= int(got['homelab_edge_netns_tcp_passive_opens_total{container="traefik"}']) <= passive_opens()
    assert not list(out.glob("*.tmp"))  # written whole, then renamed
