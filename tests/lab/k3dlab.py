#!/usr/bin/env python
"""The k3d part of the lab: a k3d-shaped cluster made of real containers.

  k3d-<c>-server-0   dnsmasq (zone home.lab), HTTPS 443, "API" 6443
  k3d-<c>-serverlb   nginx + confd watch, labels as k3d sets them,
                     soft open-file limit 1024 as in seed 000

Ports are published on 127.0.0.1 only. Usage:
  k3dlab.py up [--cluster lab] [--base-port 10000] [--count 1]
  k3dlab.py down [--cluster lab] [--count 1]
  k3dlab.py recreate-lb [--cluster lab]
"""

import argparse
import json
import random
import string
import sys
import time

import docker

LB_IMAGE = "homelab-edge/serverlb:lab"
SERVER_IMAGE = "homelab-edge/server0:lab"
# container port -> offset from the base port
PORTS = {"53/udp": 53, "53/tcp": 53, "1053/udp": 1053, "443/tcp": 443, "6443/tcp": 6443}
VALUES = """ports:
  1053.udp:
  - {server}
  443.tcp:
  - {server}
  53.tcp:
  - {server}
  53.udp:
  - {server}
  6443.tcp:
  - {server}
settings:
  workerConnections: {connections}
"""


def names(cluster):
    return {"network": "k3d-%s" % cluster, "server": "k3d-%s-server-0" % cluster,
            "lb": "k3d-%s-serverlb" % cluster}


def published(base_port):
    """Host ports (127.0.0.1) for a cluster: base+53, base+1053, base+443, base+6443."""
    return {p: ("127.0.0.1", base_port + off) for p, off in PORTS.items()}


def _networks(client, name):
    """Networks named exactly `name` (Docker's name filter also matches prefixes)."""
    return [n for n in client.networks.list(names=[name]) if n.name == name]


def _get(client, name):
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None


def lb_kwargs(cluster, base_port, labels=True):
    """base_port None publishes nothing (the lab network only)."""
    n = names(cluster)
    kw = dict(name=n["lb"], hostname=n["lb"], network=n["network"], detach=True,
              restart_policy={"Name": "unless-stopped"},
              ulimits=[docker.types.Ulimit(name="nofile", soft=1024, hard=20000)],
              ports=published(base_port) if base_port is not None else {})
    if labels:
        kw["labels"] = {"app": "k3d", "k3d.role": "loadbalancer", "k3d.cluster": cluster,
                        "k3d.version": "v5.9.0-lab"}
    return kw


def put_values(container, server, connections):
    """Like k3d: the values file goes into the container before it starts."""
    import io
    import tarfile
    data = VALUES.format(server=server, connections=connections).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("values.yaml")
        info.size, info.mode = len(data), 0o744
        tar.addfile(info, io.BytesIO(data))
    container.put_archive("/etc/confd", buf.getvalue())


def wait_ready(container, timeout=60):
    """Until confd watch runs and nginx has loaded a stream config."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        container.reload()
        if container.status == "running":
            rc, out = container.exec_run(["sh", "-c", "pgrep -f '[c]onfd -watch' >/dev/null && nginx -T 2>/dev/null | grep -c 'listen '"])
            if rc == 0 and int(out.strip() or 0) > 0:
                return
        time.sleep(0.5)
    raise RuntimeError("%s not ready after %ss:\n%s" % (container.name, timeout, container.logs(tail=20).decode()))


def create_lb(client, cluster, base_port, connections=1024, labels=True, name=None):
    n = names(cluster)
    kw = lb_kwargs(cluster, base_port, labels)
    if name:
        kw["name"] = kw["hostname"] = name
    c = client.containers.create(LB_IMAGE, **kw)
    put_values(c, n["server"], connections)
    c.start()
    return c


def up(client, cluster, base_port, connections=1024):
    n = names(cluster)
    if not _networks(client, n["network"]):
        client.networks.create(n["network"], labels={"app": "k3d", "k3d.cluster": cluster})
    if not _get(client, n["server"]):
        client.containers.run(SERVER_IMAGE, name=n["server"], hostname=n["server"], network=n["network"],
                              detach=True, labels={"app": "k3d", "k3d.role": "server", "k3d.cluster": cluster})
    lb = _get(client, n["lb"]) or create_lb(client, cluster, base_port, connections)
    if lb.status != "running":
        lb.start()
    wait_ready(lb)
    return lb


def down(client, cluster):
    """Remove every container of the cluster (by label or by k3d-<cluster>- name)."""
    n = names(cluster)
    prefix = "k3d-%s-" % cluster
    for c in client.containers.list(all=True):
        if c.name.startswith(prefix) or c.labels.get("k3d.cluster") == cluster:
            c.remove(force=True)
    for net in _networks(client, n["network"]):
        net.remove()


def recreate_lb(client, cluster, base_port):
    """What `k3d cluster edit` does: rename the old LB to <name>-xxxxx, create a
    fresh one from the image (k3d's defaults again), then delete the old one."""
    n = names(cluster)
    old = client.containers.get(n["lb"])
    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for dummy in range(5))
    old.rename("%s-%s" % (n["lb"], suffix))
    old.stop(timeout=2)
    new = create_lb(client, cluster, base_port)
    old.remove(force=True)
    return new


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down", "recreate-lb"])
    ap.add_argument("--cluster", default="lab")
    ap.add_argument("--count", type=int, default=1, help="clusters <cluster>, <cluster>2, ...")
    ap.add_argument("--base-port", type=int, default=10000, help="first cluster's base; next +10")
    a = ap.parse_args(argv)
    client = docker.from_env()
    out = []
    for i in range(a.count):
        cluster = a.cluster if i == 0 else "%s%d" % (a.cluster, i + 1)
        base = a.base_port + 10 * i
        if a.action == "up":
            out.append(up(client, cluster, base).name)
        elif a.action == "down":
            down(client, cluster)
        else:
            new = recreate_lb(client, cluster, base)
            out.append(new.name)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
