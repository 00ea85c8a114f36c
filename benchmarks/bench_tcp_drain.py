#!/usr/bin/env python
"""Benchmark how long the kernel takes to drain after a connection flood,
with kernel defaults vs the tcp_drain role's values.

Two lab containers (their own network namespaces) on one bridge network:
a server and a client. Two cases, N connections each:

  FIN_WAIT_2   the server closes every connection, the client never answers
               with its FIN: the server's orphaned sockets sit in FIN_WAIT_2
               until net.ipv4.tcp_fin_timeout (default 60 s, role 15 s).
  conntrack    the server closes first, the client closes after: conntrack
               keeps TIME_WAIT entries for
               net.netfilter.nf_conntrack_tcp_timeout_time_wait (default
               120 s, role 30 s with tcp_drain_conntrack).

Measured: seconds from the close until the count in the server's namespace
reaches 0 (polled every second, bounded). The role's values are applied with
the tcp_drain role through its containers option (the module enters the
server's namespace). Saves JSON to benchmarks/results/.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import docker

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
N = 2000
NET = "homelab-drain-bench"

SERVER = r"""
import socket, sys, time
n, linger = int(sys.argv[1]), float(sys.argv[2])
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", 9000)); ls.listen(4096)
conns = [ls.accept()[0] for _ in range(n)]
print("accepted", len(conns), flush=True)
for c in conns:
    c.close()          # the server closes first: FIN to the client
print("closed", time.time(), flush=True)
time.sleep(linger)
"""

CLIENT = r"""
import socket, sys, time
host, n, close_after = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks = []
for i in range(n):
    s = socket.create_connection((host, 9000)); socks.append(s)
time.sleep(close_after)
if close_after < 1000:
    for s in socks:
        s.close()      # the client's FIN: both sides closed, conntrack TIME_WAIT
time.sleep(600)
"""


def sh(container, cmd):
    rc, out = container.exec_run(["sh", "-c", cmd])
    return out.decode().strip()


def put(container, name, text):
    import base64
    sh(container, "echo %s | base64 -d > /tmp/%s" % (base64.b64encode(text.encode()).decode(), name))


def count(server, case):
    if case == "fin_wait_2":
        return int(sh(server, "ss -Htan state fin-wait-2 '( sport = :9000 )' | wc -l") or 0)
    return int(sh(server, "conntrack -L -p tcp --state TIME_WAIT 2>/dev/null | grep -c 'sport=' ; true") or 0)


def run_case(client, case, limit_s):
    server = client.containers.get("drain-bench-server")
    peer = client.containers.get("drain-bench-client")
    ip = server.attrs["NetworkSettings"]["Networks"][NET]["IPAddress"]
    put(server, "server.py", SERVER)
    put(peer, "client.py", CLIENT)
    server.exec_run(["sh", "-c", "python3 /tmp/server.py %d 600 > /tmp/server.log 2>&1" % N], detach=True)
    time.sleep(1)
    close_after = 100000 if case == "fin_wait_2" else 3
    peer.exec_run(["sh", "-c", "python3 /tmp/client.py %s %d %s > /tmp/client.log 2>&1" % (ip, N, close_after)],
                  detach=True)
    deadline = time.time() + 60
    while "closed" not in sh(server, "cat /tmp/server.log"):
        if time.time() > deadline:
            raise RuntimeError("the server did not close its connections: %s" % sh(server, "cat /tmp/server.log"))
        time.sleep(0.2)
    closed_at = time.time()
    time.sleep(close_after if case == "conntrack" else 0.5)
    peak = count(server, case)
    samples = [(0, peak)]
    while time.time() - closed_at < limit_s:
        time.sleep(1)
        c = count(server, case)
        samples.append((round(time.time() - closed_at, 1), c))
        if c == 0:
            break
    sh(server, "pkill -f server.py; true")
    sh(peer, "pkill -f client.py; true")
    drained = samples[-1][0] if samples[-1][1] == 0 else None
    return {"connections": N, "peak": peak, "drained_after_s": drained, "samples": samples[::5] + [samples[-1]]}


def setup(client):
    teardown(client)
    client.networks.create(NET)
    for name in ("drain-bench-server", "drain-bench-client"):
        client.containers.run("homelab-edge/client:lab", ["sleep", "infinity"], name=name, network=NET, detach=True,
                              cap_add=["NET_ADMIN"])
    server = client.containers.get("drain-bench-server")
    # conntrack only tracks in a namespace where a rule needs it (as ufw's do on a VPS)
    sh(server, "iptables -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT")


def teardown(client):
    for name in ("drain-bench-server", "drain-bench-client"):
        try:
            client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
    for net in client.networks.list(names=[NET]):
        if net.name == NET:
            net.remove()


def apply_role():
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles:\n"
                "    - role: homelab.edge.tcp_drain\n      vars:\n        tcp_drain_host: false\n"
                "        tcp_drain_conntrack: true\n        tcp_drain_containers: [drain-bench-server]\n")
    out = subprocess.run(["ansible-playbook", "-e", "ansible_python_interpreter=%s" % sys.executable, f.name],
                         capture_output=True, text=True, check=False)
    os.unlink(f.name)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:])


def main():
    client = docker.from_env()
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "docker": client.version()["Version"], "date": time.strftime("%FT%T%z")}}
    try:
        for label in ("defaults", "role"):
            for case, limit in (("fin_wait_2", 100), ("conntrack", 160)):
                setup(client)  # fresh namespaces for every case
                if label == "role":
                    apply_role()
                server = client.containers.get("drain-bench-server")
                result.setdefault(label, {})["values"] = {k: int(sh(server, "sysctl -n " + k)) for k in (
                    "net.ipv4.tcp_fin_timeout", "net.netfilter.nf_conntrack_tcp_timeout_time_wait")}
                result[label][case] = run_case(client, case, limit)
                print("%-8s %-10s peak %5d, drained after %s s" % (
                    label, case, result[label][case]["peak"], result[label][case]["drained_after_s"]), flush=True)
    finally:
        teardown(client)
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", "tcp_drain-%s.json" % time.strftime("%Y%m%dT%H%M%S"))
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print("saved %s" % path)


if __name__ == "__main__":
    main()
