#!/usr/bin/env python
"""Monitoring in the lab as a homelab runs it, from Debian's packages (the
image homelab-edge/monitor): a Prometheus and a node_exporter on the NAS
(scraping Traefik's metrics entrypoint and the NAS), and on the k3d host
(scraping the keeper's textfile through node_exporter), each loading the
rule files the roles write (inventories/lab). On the NAS also a receiver
for autoheal's webhook, which writes every message it gets to a file.

  lab/monitoring.py up [--prefix lab]     lab/monitoring.py down [--prefix lab]

Prometheus evaluates every 2 s here (a homelab: 15-60 s) so that the tests
see an alert fire within seconds; thresholds come from the inventory.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hosts  # noqa: E402

IMAGE = "homelab-edge/monitor:lab"
# on the NAS (its own engine, host network: the NAS's own namespace)
NAS_DIR = "/srv/monitoring"
NAS_PROMETHEUS = 9090
RECEIVER = "lab-receiver"          # autoheal's webhook reaches it by name on autoheal's network
RECEIVED = "/srv/monitoring/received.log"
# on this machine (the k3d host): loopback ports of its own
K3D_DIR = os.path.join(os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge"), "lab-monitoring")
K3D_PROMETHEUS, K3D_NODE_EXPORTER = 19090, 19100
INTERVAL = "2s"


def sh(*argv, **kw):
    return hosts.sh(*argv, **kw)


def config(jobs, rules):
    return json.dumps({"global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
                       "rule_files": [rules], "scrape_configs": jobs}, indent=1)


def nas_up(nas):
    """Prometheus (Traefik's targets in a file the tests keep current: its
    address changes when it is re-created), node_exporter, the receiver."""
    prom = config([{"job_name": "node", "static_configs": [{"targets": ["127.0.0.1:9100"]}]},
                   {"job_name": "traefik", "file_sd_configs": [{"files": [NAS_DIR + "/targets/traefik.json"],
                                                                "refresh_interval": "2s"}]}],
                  NAS_DIR + "/rules/*.yml")
    receiver = ("import http.server\n"
                "class H(http.server.BaseHTTPRequestHandler):\n"
                "    def do_POST(self):\n"
                "        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))\n"
                "        open('/received/received.log', 'ab').write(body + b'\\n')\n"
                "        self.send_response(200); self.end_headers()\n"
                "http.server.HTTPServer(('', 8080), H).serve_forever()\n")
    sh("docker", "exec", "-i", nas, "sh", "-c", "mkdir -p %s/rules %s/targets && cat > %s/prometheus.yml && "
       "echo '[]' > %s/targets/traefik.json && : > %s" % (NAS_DIR, NAS_DIR, NAS_DIR, NAS_DIR, RECEIVED), input=prom)
    hosts.load_images(nas, [IMAGE])
    inner = ["docker", "exec", nas, "docker"]
    sh(*inner, "rm", "-f", "prometheus", "node-exporter", RECEIVER, check=False)
    sh(*inner, "run", "-d", "--name", "prometheus", "--net", "host", "-v", "%s:%s" % (NAS_DIR, NAS_DIR), IMAGE,
       "prometheus", "--config.file=%s/prometheus.yml" % NAS_DIR, "--storage.tsdb.path=/tmp/tsdb",
       "--web.listen-address=:%d" % NAS_PROMETHEUS, "--web.enable-lifecycle")
    sh(*inner, "run", "-d", "--name", "node-exporter", "--net", "host", "--pid", "host", IMAGE,
       "prometheus-node-exporter", "--web.listen-address=127.0.0.1:9100")
    sh(*inner, "run", "-d", "--name", RECEIVER, "-v", "%s:/received" % NAS_DIR, "homelab-edge/client:lab",
       "python3", "-c", receiver)


def k3d_up():
    os.makedirs(os.path.join(K3D_DIR, "rules"), exist_ok=True)
    os.makedirs(os.path.join(K3D_DIR, "textfile"), exist_ok=True)
    with open(os.path.join(K3D_DIR, "prometheus.yml"), "w") as f:
        f.write(config([{"job_name": "node", "static_configs": [{"targets": ["127.0.0.1:%d" % K3D_NODE_EXPORTER]}]}],
                       K3D_DIR + "/rules/*.yml"))
    sh("docker", "rm", "-f", "lab-prometheus", "lab-node-exporter", check=False)
    sh("docker", "run", "-d", "--name", "lab-prometheus", "--label", hosts.LABEL, "--net", "host",
       "-v", "%s:%s" % (K3D_DIR, K3D_DIR), IMAGE, "prometheus", "--config.file=%s/prometheus.yml" % K3D_DIR,
       "--storage.tsdb.path=/tmp/tsdb", "--web.listen-address=127.0.0.1:%d" % K3D_PROMETHEUS, "--web.enable-lifecycle")
    sh("docker", "run", "-d", "--name", "lab-node-exporter", "--label", hosts.LABEL, "--net", "host", "--pid", "host",
       "-v", "%s/textfile:%s/textfile:ro" % (K3D_DIR, K3D_DIR), IMAGE, "prometheus-node-exporter",
       "--web.listen-address=127.0.0.1:%d" % K3D_NODE_EXPORTER,
       "--collector.textfile.directory=%s/textfile" % K3D_DIR)


def up(prefix="lab"):
    nas_up("%s-nas" % prefix)
    k3d_up()
    return {"nas_prometheus": "%s:%d" % (hosts.address("%s-nas" % prefix, "%s-lan" % prefix), NAS_PROMETHEUS),
            "k3d_prometheus": "127.0.0.1:%d" % K3D_PROMETHEUS}


def down(prefix="lab"):
    sh("docker", "rm", "-f", "lab-prometheus", "lab-node-exporter", check=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--prefix", default="lab")
    a = ap.parse_args(argv)
    print(json.dumps(up(a.prefix)) if a.action == "up" else down(a.prefix) or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
