#!/usr/bin/env python
"""The whole edge path of seed 001, as lab hosts (lab/hosts.py):

  client1, client2 --wan--> VPS (ufw, nginx stream proxy 80/443, Docker's engine)
                              |  WireGuard (wireguard-go), 10.8.0.1 <-> 10.8.0.2,
                              |  over its own "underlay" network
                             NAS (its own Docker engine: the admin's Traefik v3
                                  from lab/user-configs/nas/filename, publishing
                                  80/443, in front of "site" and "auth")
  lan-client --lan--> NAS (an internal client, not through the VPS)

Clients reach the NAS only through the VPS and the tunnel: they are on the
wan network, the NAS is not. Every host is reached over SSH as `edge` with
sudo (inventories/lab/hosts.yml).

  lab/edge.py up [--prefix lab]     lab/edge.py down [--prefix lab]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hosts  # noqa: E402

USER = os.path.join(HERE, "user-configs")
TUNNEL = {"vps": "10.8.0.1", "nas": "10.8.0.2", "port": 51820}
VPS_SSHD_PORT = 2222  # inside the VPS, as on many VPSes (published on 127.0.0.1 at ssh_ports()["vps"])
NAS_IMAGES = ["homelab-edge/nas:lab", "homelab-edge/autoheal:lab", "homelab-edge/socket-proxy:lab",
              "homelab-edge/client:lab"]


def names(prefix):
    return {"vps": "%s-vps" % prefix, "nas": "%s-nas" % prefix, "clients": ["%s-client1" % prefix, "%s-client2" % prefix],
            "lan_client": "%s-lan-client" % prefix, "wan": "%s-wan" % prefix, "underlay": "%s-underlay" % prefix,
            "lan": "%s-lan" % prefix}


def ssh_ports(prefix):
    """The VPS and the NAS on 127.0.0.1 (inventories/lab/hosts.yml for the prefix 'lab')."""
    base = 2224 if prefix == "lab" else 2230 + sum(map(ord, prefix)) % 50 * 2
    return {"vps": base, "nas": base + 1}


def sh(*argv, **kw):
    return hosts.sh(*argv, **kw)


def connect(name, net):
    sh("docker", "network", "connect", net, name)


def wireguard(n):
    """Keys made on the VPS, wg0 on both ends (the NAS dials out, keeps it alive)."""
    keys = {}
    for side in ("vps", "nas"):
        private = sh("docker", "exec", n[side], "wg", "genkey").stdout.strip()
        public = sh("docker", "exec", "-i", n[side], "wg", "pubkey", input=private + "\n").stdout.strip()
        keys[side] = (private, public)
    vps_underlay = hosts.address(n["vps"], n["underlay"])
    conf = {
        "vps": "[Interface]\nAddress = %s/24\nListenPort = %d\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\n"
               "AllowedIPs = %s/32\n" % (TUNNEL["vps"], TUNNEL["port"], keys["vps"][0], keys["nas"][1], TUNNEL["nas"]),
        "nas": "[Interface]\nAddress = %s/24\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nEndpoint = %s:%d\n"
               "AllowedIPs = %s/32\nPersistentKeepalive = 15\n" % (
                   TUNNEL["nas"], keys["nas"][0], keys["vps"][1], vps_underlay, TUNNEL["port"], TUNNEL["vps"]),
    }
    for side in ("vps", "nas"):
        sh("docker", "exec", "-i", n[side], "sh", "-c", "umask 077; mkdir -p /etc/wireguard; cat > /etc/wireguard/wg0.conf",
           input=conf[side])
        sh("docker", "exec", "-e", "WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go", n[side], "wg-quick", "up", "wg0")
    hosts.wait("the tunnel", lambda: sh("docker", "exec", n["vps"], "ping", "-c", "1", "-W", "1", TUNNEL["nas"],
                                        check=False).returncode == 0, timeout=30)


def traefik(n):
    """The admin's NAS: services and Traefik from their compose projects."""
    nas = n["nas"]
    for src, dest in (("nas/filename", "/srv/traefik"), ("nas/backends.yml", "/srv/apps/compose.yml")):
        sh("docker", "exec", nas, "mkdir", "-p", os.path.dirname(dest) if dest.endswith(".yml") else dest)
        sh("docker", "cp", os.path.join(USER, src) + ("/." if not src.endswith(".yml") else ""), "%s:%s" % (nas, dest))
    sh("docker", "exec", nas, "sed", "-i", "s/^name: traefik-a/name: traefik/; s/container_name: traefik-a/container_name: traefik/",
       "/srv/traefik/compose.yml")
    for project in ("/srv/apps", "/srv/traefik"):
        sh("docker", "exec", "-w", project, nas, "docker", "compose", "up", "-d")
    hosts.wait("Traefik on the NAS", lambda: sh("docker", "exec", nas, "curl", "-sk", "-o", "/dev/null", "-m", "2",
                                                "--resolve", "site.nas.lab:443:127.0.0.1", "https://site.nas.lab/",
                                                check=False).returncode == 0, timeout=60)


def up(prefix="lab"):
    n = names(prefix)
    ports = ssh_ports(prefix)
    down(prefix)
    for net in ("wan", "underlay", "lan"):
        hosts.network(n[net])
    # both booted by systemd, with Docker Engine 29 started by systemd, as users install them today
    # the VPS runs Docker's engine too (nothing published by default), as many do
    # sshd on 2222 inside, as on many VPSes: the firewall must keep what sshd really uses
    hosts.up(n["vps"], n["wan"], ports["vps"], docker=True, load=["homelab-edge/client:lab"], sshd_port=VPS_SSHD_PORT,
             nginx_conf=os.path.join(USER, "vps", "nginx-tunnel.conf"), systemd=True)
    connect(n["vps"], n["underlay"])
    hosts.up(n["nas"], n["lan"], ports["nas"], docker=True, load=NAS_IMAGES, systemd=True)
    connect(n["nas"], n["underlay"])
    for c in n["clients"]:
        hosts.client(c, n["wan"])
    hosts.client(n["lan_client"], n["lan"])
    wireguard(n)
    traefik(n)
    return {"vps": n["vps"], "nas": n["nas"], "ssh": ports,
            "vps_wan": hosts.address(n["vps"], n["wan"]), "nas_lan": hosts.address(n["nas"], n["lan"])}


def down(prefix="lab"):
    n = names(prefix)
    hosts.down(n["vps"], n["nas"], n["lan_client"], *n["clients"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--prefix", default="lab")
    a = ap.parse_args(argv)
    if a.action == "up":
        print(json.dumps(up(a.prefix)))
    else:
        down(a.prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
