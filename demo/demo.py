#!/usr/bin/env python
"""The lab demo: bring up the whole lab, show each failure, run site.yml,
show each proof, print one before/after table, remove the lab."""
import json
import os
import subprocess
import sys
import time

import docker

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import edgelab  # noqa: E402
import k3dlab  # noqa: E402
import probes  # noqa: E402

CLUSTER, BASE, HOST = "lab", 10000, "127.0.0.1"
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")


def say(msg):
    print("\n### %s" % msg, flush=True)


def k3d_measure(client, rate, count):
    lb = client.containers.get(k3dlab.names(CLUSTER)["lb"])
    dns, https, alerts = probes.dns_under_load(lb, HOST, BASE, rate, count)
    return {"DNS queries answered": "%d/%d at %d/s" % (dns["answered"], dns["sent"], rate),
            "'not enough' alerts": alerts,
            "HTTPS+API probes ok": "%d/%d" % (https["ok"], https["ok"] + https["failed"])}


def vps_measure(client):
    vps = client.containers.get("lab-vps")
    ip = vps.attrs["NetworkSettings"]["Networks"][edgelab.VPS_NET]["IPAddress"]
    flood = probes.tcp_flood(client.containers.get("lab-vps-client1"), ip, 443, n=500, hold=6)
    time.sleep(3)
    rc, out = client.containers.get("lab-vps-client2").exec_run(["curl", "-s", "-m", "5", "http://%s:443/" % ip])
    counts = flood.result()
    return {"flood 500 from one IP: established": counts["established"],
            "flood 500 from one IP: reset": counts["reset"],
            "second client served": "yes" if rc == 0 and b"ok" in out else "no"}


def nas_measure(client):
    flood = probes.https_flood(client.containers.get("lab-nas-client1"), "lab-traefik", "/slower", 500)
    time.sleep(3)
    c2 = client.containers.get("lab-nas-client2")
    status = c2.exec_run(["curl", "-s", "-m", "3", "http://lab-nas-web:8080/status"])[1].decode()
    second = c2.exec_run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10",
                          "https://lab-traefik/slow"])[1].decode()
    counts = flood.result()
    health = client.containers.get("lab-traefik").attrs["State"].get("Health", {}).get("Status", "no health check")
    return {"500 requests from one IP: 200": counts.get("200", 0),
            "500 requests from one IP: 429": counts.get("429", 0),
            "backend connections at peak": int(status.split("Active connections:")[1].split()[0]) - 1,
            "second client": second,
            "Traefik health": health}


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
    edgelab.down(client)


def proven(results):
    k3d, vps, nas = results["k3d"]["after"], results["vps"]["after"], results["nas"]["after"]
    answered, sent = k3d["DNS queries answered"].split()[0].split("/")
    return (answered == sent and k3d["'not enough' alerts"] == 0
            and vps["flood 500 from one IP: established"] <= 100 and vps["second client served"] == "yes"
            and nas["500 requests from one IP: 429"] >= 100 and nas["second client"] == "200")


def main():
    client = docker.from_env()
    results = {}
    t0 = time.time()
    cleanup(client)
    try:
        say("bring up the lab: k3d cluster 'lab', the VPS with two clients, the NAS with Traefik as it was")
        k3dlab.up(client, CLUSTER, BASE)
        edgelab.up(client)
        say("before: k3d, 100 DNS queries/s for 20 s through the stock load balancer")
        results["k3d"] = {"before": k3d_measure(client, 100, 2000)}
        say("before: VPS, 500 connections at once from one client")
        results["vps"] = {"before": vps_measure(client)}
        say("before: NAS, 500 requests at once from one client")
        results["nas"] = {"before": nas_measure(client)}
        print(json.dumps(results, indent=2))
        say("ansible-playbook site.yml (inventory: inventories/lab)")
        subprocess.run(["ansible-playbook", "site.yml"], cwd=ROOT, check=True)
        say("after: k3d, 300 DNS queries/s for 30 s through the fixed load balancer")
        results["k3d"]["after"] = k3d_measure(client, 300, 9000)
        say("after: VPS flood")
        results["vps"]["after"] = vps_measure(client)
        say("after: NAS flood")
        time.sleep(8)  # Traefik's first health checks
        results["nas"]["after"] = nas_measure(client)
        table(results)
    finally:
        cleanup(client)
    say("demo finished in %d s; the lab is removed" % (time.time() - t0))
    return 0 if results.get("nas", {}).get("after") and proven(results) else 1


if __name__ == "__main__":
    sys.exit(main())
