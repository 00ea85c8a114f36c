#!/usr/bin/env python
"""The VPS and NAS parts of the lab (inventories/lab), next to k3dlab.py.

  lab-vps                ufw + iptables-nft + nft + nginx stream proxy (capability recipe)
  lab-vps-client1/2      two client addresses on homelab-lab-vps
  lab-nas-web            nginx static site with slow endpoints on homelab-lab-nas
  lab-nas-client1/2      two client addresses on homelab-lab-nas
  lab-traefik            "the NAS as it was": Traefik from a plain compose project
                         (no middleware, no health check), which site.yml then fixes

Usage: edgelab.py up|down
"""

import os
import subprocess
import sys
import time

import docker

VPS_NET, NAS_NET = "homelab-lab-vps", "homelab-lab-nas"
NAS_DIR = "/tmp/homelab-edge-lab"
CONTAINERS = ["lab-vps", "lab-vps-client1", "lab-vps-client2", "lab-nas-web", "lab-nas-client1",
              "lab-nas-client2", "lab-traefik"]
PLAIN_STATIC = """# the NAS's Traefik before homelab.edge: no limit, no ping
entryPoints:
  web:
    address: ":80"
  websecure:
    address: ":443"
    http:
      tls: {}
  traefik:
    address: ":8080"
providers:
  file:
    directory: /etc/traefik/dynamic
log:
  level: INFO
"""
ROUTES = """http:
  routers:
    site:
      rule: PathPrefix(`/`)
      entryPoints: [websecure]
      service: site
      tls: {}
  services:
    site:
      loadBalancer:
        servers:
          - url: http://lab-nas-web:8080
"""
PLAIN_COMPOSE = """name: homelab-edge-traefik
services:
  traefik:
    image: homelab-edge/nas:lab
    container_name: lab-traefik
    restart: unless-stopped
    command: ["--configFile=/etc/traefik/traefik.yml"]
    volumes:
      - %s/traefik/config:/etc/traefik:ro
    ports:
      - "127.0.0.1:18443:443"
      - "127.0.0.1:18080:8080"
    networks: [%s]
networks:
  %s:
    external: true
""" % (NAS_DIR, NAS_NET, NAS_NET)


def _run(client, name, image, network, command=None):
    client.containers.run(image, command, name=name, hostname=name, network=network, detach=True)


def up(client):
    for net in (VPS_NET, NAS_NET):
        if not [n for n in client.networks.list(names=[net]) if n.name == net]:
            client.networks.create(net)
    # The VPS needs the capability recipe of these machines (--privileged is refused):
    # the docker CLI, because the API has no 'systempaths=unconfined'.
    subprocess.run(["docker", "run", "-d", "--name", "lab-vps", "--hostname", "lab-vps", "--network", VPS_NET,
                    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "systempaths=unconfined",
                    "homelab-edge/vps:lab"], check=True, capture_output=True)
    for n in ("lab-vps-client1", "lab-vps-client2"):
        _run(client, n, "homelab-edge/client:lab", VPS_NET, ["sleep", "infinity"])
    _run(client, "lab-nas-web", "homelab-edge/nas:lab", NAS_NET, ["backend"])
    for n in ("lab-nas-client1", "lab-nas-client2"):
        _run(client, n, "homelab-edge/client:lab", NAS_NET, ["sleep", "infinity"])
    os.makedirs(NAS_DIR + "/traefik/config/dynamic", exist_ok=True)
    for path, text in (("traefik/config/traefik.yml", PLAIN_STATIC),
                       ("traefik/config/dynamic/lab-site.yml", ROUTES), ("traefik/compose.yml", PLAIN_COMPOSE)):
        with open(os.path.join(NAS_DIR, path), "w") as f:
            f.write(text)
    subprocess.run(["docker", "compose", "--project-directory", NAS_DIR + "/traefik", "up", "-d"],
                   check=True, capture_output=True)
    for dummy in range(40):  # Traefik answers on websecure
        if subprocess.run(["curl", "-sk", "-o", "/dev/null", "-m", "2", "https://127.0.0.1:18443/"],
                          check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError("lab-traefik did not answer")


def down(client):
    for n in CONTAINERS:
        try:
            client.containers.get(n).remove(force=True)
        except docker.errors.NotFound:
            pass
    for net in client.networks.list(names=[VPS_NET, NAS_NET]):
        if net.name in (VPS_NET, NAS_NET):
            net.remove()
    subprocess.run(["rm", "-rf", NAS_DIR], check=False)


def main(argv):
    client = docker.from_env()
    if argv[1:] == ["up"]:
        down(client)
        up(client)
    elif argv[1:] == ["down"]:
        down(client)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
