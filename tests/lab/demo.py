#!/usr/bin/env python
"""The lab demo: failure before, site.yml, proof after, one table."""
import json
import os
import subprocess
import sys
import time

import docker

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import k3dlab  # noqa: E402
import probes  # noqa: E402

CLUSTER, BASE, HOST = "lab", 10000, "127.0.0.1"
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")


def say(msg):
    print("\n### %s" % msg, flush=True)


def dns_and_https(lb, rate, count):
    t0 = time.time()
    prober = probes.Prober([(HOST, BASE + 443), (HOST, BASE + 6443)])
    prober.start()
    dns = probes.dns_load(HOST, [BASE + 53, BASE + 1053], rate=rate, count=count)
    https = prober.stop()
    return {"queries": "%d/s x %d" % (rate, count), "answered": "%d/%d" % (dns["answered"], dns["sent"]),
            "alerts": probes.count_in_logs(lb, probes.NOT_ENOUGH, t0),
            "https": "%d ok, %d failed" % (https["ok"], https["failed"])}


def k3d_part(client, results):
    say("k3d: bring up cluster 'lab' (server-0 with DNS + HTTPS + 6443, stock load balancer)")
    lb = k3dlab.up(client, CLUSTER, BASE)
    say("k3d before: 100 DNS queries/s for 20 s through the stock load balancer")
    results["k3d"] = {"before": dns_and_https(lb, 100, 2000)}
    print(results["k3d"]["before"])


def k3d_after(client, results):
    lb = client.containers.get(k3dlab.names(CLUSTER)["lb"])
    say("k3d after: 300 DNS queries/s for 30 s through the fixed load balancer")
    results["k3d"]["after"] = dns_and_https(lb, 300, 9000)
    print(results["k3d"]["after"])


def table(results):
    rows = [("part", "measure", "before", "after")]
    for part, r in results.items():
        for key in r["before"]:
            rows.append((part, key, str(r["before"][key]), str(r.get("after", {}).get(key, "-"))))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    say("before / after")
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    os.makedirs(os.path.join(ROOT, "tests", "output"), exist_ok=True)
    with open(os.path.join(ROOT, "tests", "output", "demo.json"), "w") as f:
        json.dump(results, f, indent=2)


def cleanup(client):
    subprocess.run([sys.executable, KEEPER, "--config", "/etc/homelab-edge/k3d-serverlb.json", "--stop"],
                   capture_output=True, check=False)
    k3dlab.down(client, CLUSTER)


def main():
    client = docker.from_env()
    results = {}
    t0 = time.time()
    cleanup(client)
    try:
        k3d_part(client, results)
        say("ansible-playbook site.yml (inventory: inventories/lab)")
        subprocess.run(["ansible-playbook", "site.yml"], cwd=ROOT, check=True)
        k3d_after(client, results)
        table(results)
    finally:
        cleanup(client)
    say("demo finished in %d s; the lab is removed" % (time.time() - t0))
    ok = all(r["after"]["alerts"] == 0 and r["after"]["answered"].split("/")[0] == r["after"]["answered"].split("/")[1]
             for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
