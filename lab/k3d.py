#!/usr/bin/env python
"""Real k3d clusters for the lab.

The k3d CLI (built by lab.sh at a pinned version), k3d's own load-balancer
image (built from k3d's proxy/ files of that version) and k3d's own
lifecycle: cluster create, node create/delete, cluster edit, stop/start.
The one stand-in is the server node (homelab-edge/k3d-server:lab, see
lab/images/k3d-server/k3s): no k3s can be had here.

Ports are published on 127.0.0.1 only, within base..base+99 (bases are
multiples of 100): DNS 53 (udp, tcp) on base+53, 1053 (udp) on base+54,
443 on base+43 and the API on base+44. Without a base port they go to
random ports on 127.0.0.1 (k3d maps the same ports on the load balancer).

  lab/k3d.py up NAME... [--base-port N] [--host HOST]    lab/k3d.py down NAME... [--host HOST]

--host runs the k3d CLI inside a lab host (docker exec; lab/hosts.py up
--systemd --docker: Docker Engine 29) on that host's engine, with the k3d
binary and images copied in (see install_in_host()); its ports are then the
host's own 127.0.0.1.
"""

import argparse
import contextlib
import os
import subprocess
import sys
import time

NETWORK = "homelab-edge-k3d"
# k3d's load balancer with BusyBox's userland, as k3d's real (Alpine) image has it
BUSYBOX_LB = "homelab-edge/k3d-proxy-busybox:lab"
SERVER_IMAGE = "homelab-edge/k3d-server:lab"
ENV = {"K3D_IMAGE_LOADBALANCER": "homelab-edge/k3d-proxy:lab", "K3D_IMAGE_TOOLS": "homelab-edge/k3d-tools:lab"}
# container port -> offset from the base port (seed 000: DNS 53 udp+tcp, 1053 for other clusters' CoreDNS)
PORTS = (("53/udp", 53), ("53/tcp", 53), ("1053/udp", 54), ("443/tcp", 43))
API_OFFSET = 44
# the UDP profile of each DNS port above, as the lab's inventories declare it (k3d_serverlb_udp_ports)
UDP_PROFILES = {53: "dns", 1053: "dns"}


def endpoints(base_port, host="127.0.0.1"):
    """Where a cluster published on base_port answers: DNS ports, and the
    HTTPS and API addresses."""
    offsets = dict(PORTS)
    return {"dns": [base_port + offsets["53/udp"], base_port + offsets["1053/udp"]],
            "https": (host, base_port + offsets["443/tcp"]), "api": (host, base_port + API_OFFSET)}


def lb_name(cluster):
    return "k3d-%s-serverlb" % cluster


def server_name(cluster, index=0):
    return "k3d-%s-server-%d" % (cluster, index)


def k3d(*args, timeout=300, check=True, lb_image=None, host=None):
    """Run the k3d CLI with the lab's images (lb_image: another load-balancer
    image, e.g. BUSYBOX_LB), here or inside the lab host `host`; returns the
    CompletedProcess."""
    images = dict(ENV, **({"K3D_IMAGE_LOADBALANCER": lb_image} if lb_image else {}))
    env = dict(os.environ, **images)
    argv = ["k3d"] + list(args)
    if host:
        argv = ["docker", "exec"] + ["--env=%s=%s" % kv for kv in sorted(images.items())] + [host] + argv
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise RuntimeError("k3d %s failed (rc=%d):\n%s" % (" ".join(args), out.returncode, out.stderr[-3000:]))
    return out


def _ensure_network(name):
    if subprocess.run(["docker", "network", "inspect", name], capture_output=True, check=False).returncode:
        subprocess.run(["docker", "network", "create", name], capture_output=True, check=True)


def port_args(base_port):
    args = []
    for spec, offset in PORTS:
        port, proto = spec.split("/")
        host_port = "127.0.0.1:%d:" % (base_port + offset) if base_port else "127.0.0.1::"
        args += ["-p", "%s%s/%s@loadbalancer" % (host_port, port, proto)]
    return args + ["--api-port", "127.0.0.1:%d" % (base_port + API_OFFSET if base_port else 0)]


def create(cluster, base_port=None, network=NETWORK, extra=(), lb_image=None, host=None):
    """`k3d cluster create` on the shared network, DNS and HTTPS @loadbalancer
    (in a lab host: k3d creates the network on the host's engine)."""
    if not host:
        _ensure_network(network)
    k3d("cluster", "create", cluster, "--image", SERVER_IMAGE, "--network", network,
        "--kubeconfig-update-default=false", "--kubeconfig-switch-context=false",
        *(port_args(base_port) + list(extra)), lb_image=lb_image, host=host)
    return lb_name(cluster)


def delete(*clusters, host=None):
    for cluster in clusters:
        k3d("cluster", "delete", cluster, check=False, host=host)


def install_in_host(host, cache=os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge")):
    """The lab's k3d CLI into a lab host (its images: lab/hosts.py up --load)."""
    subprocess.run(["docker", "cp", os.path.realpath(os.path.join(cache, "bin", "k3d")), "%s:/usr/local/bin/k3d" % host],
                   capture_output=True, text=True, check=True, timeout=120)


def node_create(cluster, node):
    """A server node more: k3d rewrites the load balancer's values.yaml."""
    k3d("node", "create", node, "--cluster", cluster, "--role", "server", "--image", SERVER_IMAGE)
    return "k3d-%s-0" % node


def node_delete(node):
    k3d("node", "delete", node)


def port_add(cluster, spec, lb_image=None):
    """`k3d cluster edit --port-add`: k3d renames, recreates and deletes the load balancer."""
    k3d("cluster", "edit", cluster, "--port-add", spec, lb_image=lb_image)


def wait_serving(client, cluster, timeout=60):
    """Until nginx runs in the cluster's load balancer (k3d's entrypoint
    renders three times, 2 s apart, before it starts nginx)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = client.containers.get(lb_name(cluster))
            if c.status == "running" and c.exec_run(["pgrep", "-f", "nginx: worker process"]).exit_code == 0:
                return c
        except Exception:  # deliberate: the container may be between rename and create
            pass
        time.sleep(0.3)
    raise RuntimeError("%s does not serve after %ss" % (lb_name(cluster), timeout))


def restart_lb(client, cluster):
    """Restart the cluster's load balancer (it forgets every session) and
    return it once nginx serves again."""
    client.containers.get(lb_name(cluster)).restart(timeout=2)
    return wait_serving(client, cluster)


@contextlib.contextmanager
def dns_server_hung(client, cluster):
    """The cluster's DNS server (dnsmasq in the server node) stopped with
    SIGSTOP inside the block - running, answering nothing - and resumed
    after it, also when the block fails."""
    server = client.containers.get(server_name(cluster))

    def signal(name):
        rc, out = server.exec_run(["pkill", "-%s" % name, "-x", "dnsmasq"])
        if rc != 0:
            raise RuntimeError("pkill -%s dnsmasq in %s: rc=%s %s" % (name, server.name, rc, out))
    signal("STOP")
    try:
        yield server
    finally:
        signal("CONT")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("clusters", nargs="+")
    ap.add_argument("--base-port", type=int)
    ap.add_argument("--host")
    a = ap.parse_args(argv)
    if a.action == "up":
        if a.host:
            install_in_host(a.host)
        for i, cluster in enumerate(a.clusters):
            print(create(cluster, a.base_port + 100 * i if a.base_port else None, host=a.host))
    else:
        delete(*a.clusters, host=a.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
