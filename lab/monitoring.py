#!/usr/bin/env python
"""Monitoring in the lab as a homelab runs it, from Debian's packages (the
image homelab-edge/monitor): a Prometheus and a node_exporter on the NAS
(scraping Traefik's metrics entrypoint and the NAS), and on the k3d host
(scraping the keeper's textfile through node_exporter), each loading the
rule files the roles write (inventories/lab). On the NAS also a receiver
for autoheal's webhook, which writes every message it gets to a file.
Probes as the README's "Monitoring" says (Debian's blackbox_exporter):
through each k3d load balancer from this host (DNS, HTTPS, the API; job
blackbox-k3d on this host's Prometheus), and of the site through the VPS
from a client on the WAN (job blackbox-edge on the NAS's Prometheus, which
reaches that client on the LAN: the probe goes out on the WAN side).

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
import k3d  # noqa: E402

IMAGE = "homelab-edge/monitor:lab"
# on the NAS (its own engine, host network: the NAS's own namespace)
NAS_DIR = "/srv/monitoring"
NAS_PROMETHEUS = 9090
RECEIVER = "lab-receiver"          # autoheal's webhook reaches it by name on autoheal's network
RECEIVED = "/srv/monitoring/received.log"
# on this machine (the k3d host): loopback ports of its own
K3D_DIR = os.path.join(os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge"), "lab-monitoring")
K3D_PROMETHEUS, K3D_NODE_EXPORTER, K3D_BLACKBOX = 19090, 19100, 19115
INTERVAL = "2s"
# the k3d clusters molecule/default makes (lab/k3d.py up lab lab2 --base-port 10000: 100 apart)
K3D_CLUSTERS = (("lab", 10000), ("lab2", 10100))
EDGE_PROBE, EDGE_PROBE_PORT = "lab-edge-probe", 9115   # a WAN client that probes the site through the VPS
# each probe's timeout: under the scrape's (the 2-s interval), as blackbox_exporter needs
BLACKBOX = {"modules": {
    "dns_udp": {"prober": "dns", "timeout": "1500ms",
                "dns": {"query_name": "kubernetes.default.svc.cluster.local", "transport_protocol": "udp",
                        "preferred_ip_protocol": "ip4", "valid_rcodes": ["NOERROR", "NXDOMAIN"]}},
    "tcp_tls": {"prober": "tcp", "timeout": "1500ms",
                "tcp": {"tls": True, "tls_config": {"insecure_skip_verify": True}, "preferred_ip_protocol": "ip4"}},
    "edge_https": {"prober": "http", "timeout": "1500ms",
                   "http": {"preferred_ip_protocol": "ip4", "valid_status_codes": [200],
                            "headers": {"Host": "site.nas.lab"},
                            "tls_config": {"insecure_skip_verify": True, "server_name": "site.nas.lab"}}}}}


def sh(*argv, **kw):
    return hosts.sh(*argv, **kw)


def config(jobs, rules):
    return json.dumps({"global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
                       "rule_files": [rules], "scrape_configs": jobs}, indent=1)


def probe_job(name, exporter, static=None, files=None):
    """A blackbox_exporter job: each target's address becomes the probe's target (and the instance), its
    `module` label the probe's module."""
    job = {"job_name": name, "metrics_path": "/probe",
           "relabel_configs": [{"source_labels": ["__address__"], "target_label": "__param_target"},
                               {"source_labels": ["module"], "target_label": "__param_module"},
                               {"source_labels": ["__param_target"], "target_label": "instance"},
                               {"target_label": "__address__", "replacement": exporter}]}
    if static:
        job["static_configs"] = static
    if files:
        job["file_sd_configs"] = [{"files": files, "refresh_interval": "2s"}]
    return job


def k3d_probe_targets():
    """DNS, HTTPS and the API through each lab cluster's load balancer, labelled with its cluster."""
    out = []
    for cluster, base in K3D_CLUSTERS:
        e = k3d.endpoints(base)
        out += [{"targets": ["127.0.0.1:%d" % e["dns"][0]], "labels": {"module": "dns_udp", "k3d_cluster": cluster}},
                {"targets": ["%s:%d" % e["https"], "%s:%d" % e["api"]],
                 "labels": {"module": "tcp_tls", "k3d_cluster": cluster}}]
    return out


def blackbox(name, listen, *network):
    """A blackbox_exporter of this host's engine, with the lab's modules (BLACKBOX, written here each time)."""
    os.makedirs(K3D_DIR, exist_ok=True)
    config_file = os.path.join(K3D_DIR, "blackbox.yml")
    with open(config_file, "w") as f:
        f.write(json.dumps(BLACKBOX, indent=1))
    sh("docker", "rm", "-f", name, check=False)
    sh("docker", "run", "-d", "--name", name, "--label", hosts.LABEL, *network,
       "-v", "%s:/etc/blackbox.yml:ro" % config_file, IMAGE, "prometheus-blackbox-exporter",
       "--config.file=/etc/blackbox.yml", "--web.listen-address=%s" % listen)


def edge_probe(prefix):
    """A client on the WAN with blackbox_exporter, on the LAN too so that the NAS's Prometheus scrapes it:
    (its LAN address, the VPS's WAN address)."""
    wan, lan, vps = "%s-wan" % prefix, "%s-lan" % prefix, "%s-vps" % prefix
    blackbox(EDGE_PROBE, ":%d" % EDGE_PROBE_PORT, "--network", wan)
    sh("docker", "network", "connect", lan, EDGE_PROBE)
    return hosts.address(EDGE_PROBE, lan), hosts.address(vps, wan)


def nas_up(nas, prefix):
    """Prometheus (Traefik's targets in a file the tests keep current: its
    address changes when it is re-created; the site's probes through the VPS),
    node_exporter, the receiver."""
    probe, vps = edge_probe(prefix)
    prom = config([{"job_name": "node", "static_configs": [{"targets": ["127.0.0.1:9100"]}]},
                   {"job_name": "traefik", "file_sd_configs": [{"files": [NAS_DIR + "/targets/traefik.json"],
                                                                "refresh_interval": "2s"}]},
                   probe_job("blackbox-edge", "%s:%d" % (probe, EDGE_PROBE_PORT),
                             static=[{"targets": ["https://%s/" % vps], "labels": {"module": "edge_https"}}])],
                  NAS_DIR + "/rules/*.yml")
    receiver = ("import http.server\n"
                "class H(http.server.BaseHTTPRequestHandler):\n"
                "    def do_POST(self):\n"
                "        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))\n"
                "        open('/received/received.log', 'ab').write(body + b'\\n')\n"
                "        self.send_response(200); self.end_headers()\n"
                "http.server.HTTPServer(('', 8080), H).serve_forever()\n")
    sh("docker", "exec", "-i", nas, "sh", "-c", "mkdir -p %s/rules %s/targets %s/textfile && cat > %s/prometheus.yml && "
       "echo '[]' > %s/targets/traefik.json && : > %s" % (NAS_DIR, NAS_DIR, NAS_DIR, NAS_DIR, NAS_DIR, RECEIVED),
       input=prom)
    hosts.load_images(nas, [IMAGE])
    inner = ["docker", "exec", nas, "docker"]
    sh(*inner, "rm", "-f", "prometheus", "node-exporter", RECEIVER, check=False)
    sh(*inner, "run", "-d", "--name", "prometheus", "--net", "host", "-v", "%s:%s" % (NAS_DIR, NAS_DIR), IMAGE,
       "prometheus", "--config.file=%s/prometheus.yml" % NAS_DIR, "--storage.tsdb.path=/tmp/tsdb",
       "--web.listen-address=:%d" % NAS_PROMETHEUS, "--web.enable-lifecycle")
    # its textfile directory: where the tcp_drain role writes Traefik's own TCP counters (the lab inventory's
    # tcp_drain_metrics_dir)
    sh(*inner, "run", "-d", "--name", "node-exporter", "--net", "host", "--pid", "host",
       "-v", "%s/textfile:%s/textfile:ro" % (NAS_DIR, NAS_DIR), IMAGE, "prometheus-node-exporter",
       "--web.listen-address=127.0.0.1:9100", "--collector.textfile.directory=%s/textfile" % NAS_DIR)
    sh(*inner, "run", "-d", "--name", RECEIVER, "-v", "%s:/received" % NAS_DIR, "homelab-edge/client:lab",
       "python3", "-c", receiver)


def k3d_up():
    for d in ("rules", "textfile", "targets"):
        os.makedirs(os.path.join(K3D_DIR, d), exist_ok=True)
    with open(os.path.join(K3D_DIR, "targets", "k3d-probes.json"), "w") as f:
        f.write(json.dumps(k3d_probe_targets(), indent=1))
    with open(os.path.join(K3D_DIR, "prometheus.yml"), "w") as f:
        f.write(config([{"job_name": "node", "static_configs": [{"targets": ["127.0.0.1:%d" % K3D_NODE_EXPORTER]}]},
                        probe_job("blackbox-k3d", "127.0.0.1:%d" % K3D_BLACKBOX,
                                  files=[K3D_DIR + "/targets/k3d-probes.json"])],
                       K3D_DIR + "/rules/*.yml"))
    sh("docker", "rm", "-f", "lab-prometheus", "lab-node-exporter", check=False)
    blackbox("lab-blackbox", "127.0.0.1:%d" % K3D_BLACKBOX, "--net", "host")
    sh("docker", "run", "-d", "--name", "lab-prometheus", "--label", hosts.LABEL, "--net", "host",
       "-v", "%s:%s" % (K3D_DIR, K3D_DIR), IMAGE, "prometheus", "--config.file=%s/prometheus.yml" % K3D_DIR,
       "--storage.tsdb.path=/tmp/tsdb", "--web.listen-address=127.0.0.1:%d" % K3D_PROMETHEUS, "--web.enable-lifecycle")
    sh("docker", "run", "-d", "--name", "lab-node-exporter", "--label", hosts.LABEL, "--net", "host", "--pid", "host",
       "-v", "%s/textfile:%s/textfile:ro" % (K3D_DIR, K3D_DIR), IMAGE, "prometheus-node-exporter",
       "--web.listen-address=127.0.0.1:%d" % K3D_NODE_EXPORTER,
       "--collector.textfile.directory=%s/textfile" % K3D_DIR)


def up(prefix="lab"):
    nas_up("%s-nas" % prefix, prefix)
    k3d_up()
    return {"nas_prometheus": "%s:%d" % (hosts.address("%s-nas" % prefix, "%s-lan" % prefix), NAS_PROMETHEUS),
            "k3d_prometheus": "127.0.0.1:%d" % K3D_PROMETHEUS}


def down(prefix="lab"):
    sh("docker", "rm", "-f", "lab-prometheus", "lab-node-exporter", "lab-blackbox", EDGE_PROBE, check=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--prefix", default="lab")
    a = ap.parse_args(argv)
    print(json.dumps(up(a.prefix)) if a.action == "up" else down(a.prefix) or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
