#!/usr/bin/env python
"""The lab demo: bring up the whole lab (real k3d clusters, and the edge path
client -> VPS -> WireGuard -> NAS with the admin's own Traefik), show each
failure, run site.yml, show each proof, print one before/after table (also
tests/output/demo.json), remove the lab.

Exit code 0 only when every "before" showed the failure and every "after"
the fix."""
import json
import os
import subprocess
import sys
import time

import docker

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path[:0] = [os.path.join(ROOT, "lab"), os.path.join(ROOT, "tests", "support")]
import edge  # noqa: E402
import hosts  # noqa: E402
import k3d  # noqa: E402
import outage  # noqa: E402
import probes  # noqa: E402

CLUSTERS, BASE = ("lab", "lab2"), 10000
INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")


def say(msg):
    print("\n### %s" % msg, flush=True)


def k3d_measure(client, rate, count):
    ep = k3d.endpoints(BASE)
    lbc = client.containers.get(k3d.lb_name("lab"))
    dns, tcp, alerts = probes.dns_under_load(lbc, "127.0.0.1", ep["dns"], [ep["https"], ep["api"]], rate, count)
    return {"DNS queries answered": "%d/%d at %d/s" % (dns["answered"], dns["sent"], rate),
            "'not enough' alerts": alerts,
            "HTTPS+API probes ok": "%d/%d" % (tcp["ok"], tcp["ok"] + tcp["failed"])}


def k3d_recreate(client):
    """k3d re-creates lab2's load balancer: seconds until nginx.conf has the fix."""
    old = client.containers.get(k3d.lb_name("lab2")).id
    k3d.port_add("lab2", "127.0.0.1:%d:853/udp@loadbalancer" % (BASE + 185))
    new = client.containers.get(k3d.lb_name("lab2"))
    assert new.id != old
    t0 = time.time()
    while time.time() - t0 < 30:
        if b"proxy_responses 1;" in new.exec_run(["cat", "/etc/nginx/nginx.conf"]).output:
            return "fixed %.1f s after k3d returned" % (time.time() - t0)
        time.sleep(0.2)
    return "not fixed in 30 s"


def get(container, address, name="site"):
    out = subprocess.run(["docker", "exec", container, "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10",
                          "--resolve", "%s.nas.lab:443:%s" % (name, address), "https://%s.nas.lab/" % name],
                         capture_output=True, text=True, check=False)
    return out.stdout


def edge_measure(client, lab):
    """150 connections at once from client1 through the VPS to the NAS;
    client2 asks the same site meanwhile; what Traefik saw."""
    since = int(time.time()) - 1
    flood = probes.https_flood(client.containers.get("lab-client1"), lab["vps_wan"], "/slower", 150, 443, "site.nas.lab")
    time.sleep(3)
    second = [get("lab-client2", lab["vps_wan"]) for dummy in range(3)]
    counts = flood.result()
    log = subprocess.run(["docker", "exec", "lab-nas", "docker", "logs", "--since", str(since), "traefik"],
                         capture_output=True, text=True, check=False).stdout
    seen = set(json.loads(ln).get("ClientHost") for ln in log.splitlines() if ln.startswith("{"))
    return {"150 connections from one IP: reset at the VPS": sum(v for k, v in counts.items() if not k.isdigit()),
            "150 connections from one IP: answered 200": counts.get("200", 0),
            "150 connections from one IP: answered 429": counts.get("429", 0),
            "second client (same site) meanwhile": ",".join(second),
            "client addresses Traefik saw": len(seen)}


def wedge(client, seconds):
    """Traefik stopped (SIGSTOP): still running, answering nothing."""
    nas = hosts.address("lab-nas", "lab-lan")

    def sh(*a):
        return subprocess.run(["docker", "exec", "lab-nas"] + list(a), capture_output=True, text=True, check=False)
    started = sh("docker", "inspect", "-f", "{{.State.StartedAt}}", "traefik").stdout
    t0 = time.time()
    sh("docker", "kill", "-s", "STOP", "traefik")
    healed = None
    while time.time() - t0 < seconds:
        if sh("docker", "inspect", "-f", "{{.State.StartedAt}}", "traefik").stdout != started and \
                get("lab-lan-client", nas) == "200":
            healed = round(time.time() - t0, 1)
            break
        time.sleep(0.5)
    if healed is None:
        sh("docker", "kill", "-s", "CONT", "traefik")
    health = sh("docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", "traefik").stdout.strip()
    return {"Traefik wedged (SIGSTOP): served again after": "%s s" % healed if healed else "not in %d s" % seconds,
            "Traefik health check": health or "none"}


def ladder(lab):
    outage.cap_cpu(0.5)
    run = outage.run(lab["vps_wan"], lab["nas_lan"], flood_s=30, after_s=30, label="demo")["summary"]
    flood = "seed 001's flood via the VPS (30 s, Traefik at 0.5 CPU)"
    return {"%s: LAN probes answered" % flood: "%s%%" % run["probes_answered_pct"],
            "%s: worst probe latency" % flood: "%s s" % run["worst_probe_latency_s"],
            "%s: peak conntrack entries on the NAS" % flood: run["peak_conntrack"],
            "%s: peak TIME_WAIT sockets in Traefik's namespace" % flood: run["peak_time_wait"],
            "%s: healthy again after it" % flood: "%s s" % run["healthy_after_flood_s"]
            if run["healthy_after_flood_s"] is not None else "not in 30 s"}


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


def showed_the_failure(results):
    k, e, n = results["k3d"]["before"], results["edge"]["before"], results["nas"]["before"]
    answered, sent = k["DNS queries answered"].split()[0].split("/")
    return (int(answered) < int(sent) and k["'not enough' alerts"] > 0
            and e["150 connections from one IP: reset at the VPS"] == 0 and e["client addresses Traefik saw"] == 1
            and n["Traefik wedged (SIGSTOP): served again after"].startswith("not"))


def proved_the_fix(results):
    k, e, n = results["k3d"]["after"], results["edge"]["after"], results["nas"]["after"]
    answered, sent = k["DNS queries answered"].split()[0].split("/")
    return (answered == sent and k["'not enough' alerts"] == 0 and k["recreated by k3d"].startswith("fixed")
            and e["150 connections from one IP: reset at the VPS"] == 50
            and e["150 connections from one IP: answered 429"] == 50
            and set(e["second client (same site) meanwhile"].split(",")) == {"200"} and e["client addresses Traefik saw"] >= 2
            and not n["Traefik wedged (SIGSTOP): served again after"].startswith("not"))


def cleanup():
    subprocess.run([sys.executable, KEEPER, "--config", "/etc/homelab-edge/k3d-serverlb.json", "--stop"],
                   capture_output=True, check=False)
    k3d.delete(*CLUSTERS)
    edge.down()


def main():
    client = docker.from_env()
    results = {}
    t0 = time.time()
    cleanup()
    ok = False
    try:
        say("bring up the lab: k3d clusters lab and lab2 (k3d cluster create), the VPS, the WireGuard tunnel, the NAS "
            "with the admin's own Traefik")
        for i, cluster in enumerate(CLUSTERS):
            k3d.create(cluster, BASE + 100 * i)
        lab = edge.up()
        k3d.wait_serving(client, "lab")
        say("before: k3d, 100 DNS queries/s for 20 s through k3d's own load balancer")
        results["k3d"] = {"before": dict(k3d_measure(client, 100, 2000), **{"recreated by k3d": "-"})}
        say("before: 150 connections at once from one client, through the VPS and the tunnel")
        results["edge"] = {"before": edge_measure(client, lab)}
        say("before: the NAS's Traefik wedged, and seed 001's flood")
        results["nas"] = {"before": dict(wedge(client, 30), **ladder(lab))}
        print(json.dumps(results, indent=2))
        say("ansible-playbook -i inventories/lab/hosts.yml site.yml")
        subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(ROOT, "site.yml")], check=True)
        say("after: k3d, 300 DNS queries/s for 30 s; then k3d re-creates a load balancer")
        results["k3d"]["after"] = dict(k3d_measure(client, 300, 9000), **{"recreated by k3d": k3d_recreate(client)})
        say("after: the same 150 connections through the VPS")
        results["edge"]["after"] = edge_measure(client, lab)
        say("after: Traefik wedged again, and the same flood")
        time.sleep(10)  # Traefik's first health checks after its restart
        results["nas"]["after"] = dict(wedge(client, 90), **ladder(lab))
        table(results)
        ok = showed_the_failure(results) and proved_the_fix(results)
    finally:
        cleanup()
    say("demo finished in %d s; the lab is removed; %s" % (time.time() - t0, "proved" if ok else "NOT PROVED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
