#!/usr/bin/env python
"""Molecule vps_nginx's hosts, on one lab network:

  vpsn-client --> vpsn-vps (the lab's host image, no systemd: Debian 12's nginx-light with
                  |          libnginx-mod-stream, reached over SSH as `edge` with sudo; the admin's
                  |          streams kept as Debian keeps sites, lab/user-configs/vps/nginx-streams.conf)
                  |  10.8.0.2, the NAS's tunnel address of the seed (routed to the NAS on the network)
                 vpsn-nas   the real Traefik v3 (homelab-edge/nas:lab), PROXY protocol trusted from the VPS's
                            address only on :80, :443 and :8443, its JSON access log naming each client;
                            the image's nginx as the backend; standin.py's UDP echo on 443 (QUIC's place:
                            it records whether a datagram starts with "PROXY") and its picky server on 9444

  python molecule/vps_nginx/lab.py up|down
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lab"))
import hosts  # noqa: E402

NET = "homelab-vps-nginx"
VPS, NAS, CLIENT = "vpsn-vps", "vpsn-nas", "vpsn-client"
SSH_PORT = 2242
TUNNEL = "10.8.0.2"
USER_CONFIGS = os.path.join(ROOT, "lab", "user-configs", "vps")
NAS_IMAGE = "homelab-edge/nas:lab"
DYNAMIC = """http:
  routers:
    plain:
      rule: "PathPrefix(`/`)"
      entryPoints: [web]
      service: backend
    secure:
      rule: "PathPrefix(`/`)"
      entryPoints: [websecure, alt]
      service: backend
      tls: {}
  services:
    backend:
      loadBalancer:
        servers:
          - url: "http://127.0.0.1:8080"
"""


def sh(*argv, **kw):
    return hosts.sh(*argv, **kw)


def nas_flags(trusted):
    flags = ["--providers.file.filename=/etc/traefik/dynamic.yml", "--accesslog=true", "--accesslog.format=json",
             "--accesslog.filepath=/tmp/access.log", "--log.level=INFO"]
    for name, address in (("web", ":80"), ("websecure", ":443"), ("alt", ":8443")):
        flags += ["--entryPoints.%s.address=%s" % (name, address),
                  "--entryPoints.%s.proxyProtocol.trustedIPs=%s/32" % (name, trusted)]
    return flags


def debian_layout():
    """The admin's streams as lab/user-configs/vps has them: streams-available/nas, linked from streams-enabled/."""
    sh("docker", "exec", VPS, "mkdir", "-p", "/etc/nginx/streams-available", "/etc/nginx/streams-enabled")
    sh("docker", "cp", os.path.join(USER_CONFIGS, "streams-available", "nas"), "%s:/etc/nginx/streams-available/nas" % VPS)
    sh("docker", "exec", VPS, "ln", "-sfn", "/etc/nginx/streams-available/nas", "/etc/nginx/streams-enabled/nas")
    sh("docker", "exec", VPS, "nginx", "-s", "reload")


def up():
    down()
    hosts.up(VPS, NET, SSH_PORT, nginx_conf=os.path.join(USER_CONFIGS, "nginx-streams.conf"))
    vps = hosts.address(VPS, NET)
    sh("docker", "create", "--name", NAS, "--hostname", "nas", "--network", NET, "--label", hosts.LABEL,
       "--cap-add", "NET_ADMIN", NAS_IMAGE, *nas_flags(vps))
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:  # the NAS's files go in before Traefik starts
        f.write(DYNAMIC)
        f.flush()
        sh("docker", "cp", f.name, "%s:/etc/traefik/dynamic.yml" % NAS)
    sh("docker", "cp", os.path.join(HERE, "standin.py"), "%s:/usr/local/bin/standin.py" % NAS)
    sh("docker", "start", NAS)
    nas = hosts.address(NAS, NET)
    sh("docker", "exec", NAS, "ip", "address", "add", "%s/32" % TUNNEL, "dev", "lo")
    sh("docker", "exec", "-d", NAS, "nginx")  # the backend (the image's nginx.conf: 8080)
    sh("docker", "exec", "-d", NAS, "python3", "/usr/local/bin/standin.py", "udp-echo", "%s:443" % TUNNEL, "/tmp/udp.log")
    sh("docker", "exec", "-d", NAS, "python3", "/usr/local/bin/standin.py", "picky", "9444", "/tmp/picky.log")
    sh("docker", "exec", VPS, "ip", "route", "replace", "%s/32" % TUNNEL, "via", nas)
    hosts.client(CLIENT, NET)
    debian_layout()
    hosts.wait("Traefik on the NAS through the tunnel address", lambda: sh(
        "docker", "exec", VPS, "curl", "-sk", "-o", "/dev/null", "-m", "2", "https://%s/" % TUNNEL,
        check=False).returncode == 0, timeout=60)
    return {"vps": vps, "nas": nas, "client": hosts.address(CLIENT, NET)}


def down():
    hosts.down(VPS, NAS, CLIENT)


def main(argv):
    if argv[1:] == ["up"]:
        print(json.dumps(up()))
    elif argv[1:] == ["down"]:
        down()
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
