#!/usr/bin/env python
"""Issue 63: a flood from many source addresses through the lab's edge path, with the per-address limits alone and
with the bounds on all sources together, in the same run.

The edge lab of lab/edge.py under a prefix of its own (`flood-vps`, `flood-nas`, ...: never the lab of Molecule or the
demo), set up by site.yml over inventories/lab's VPS and NAS (many_sources.inventory). The NAS on one core (CPU 1),
the VPS, the clients and the generator on the other (CPU 0), as bench_nas_wedge.py pins them. Configurations, in
this order:

  per-address     what the collection shipped before issue 63: the VPS's connlimit per address (100), Traefik's
                  in-flight limit per client (50, per router), PROXY protocol (site.yml with vps_connlimit_total 0,
                  vps_connlimit_rate 0)
  bounds          site.yml with the bounds on all sources together: the VPS's total (400 per port) and rate bound
                  (4/s, bucket 100; the total is the role's default, the rate bound opt-in) and Traefik's total for the tunnel (200 per router), with
                  the two steps the docs leave to the admin (the routes list the tunnel's entrypoint; the VPS forwards
                  to its port)
  traefik-total   the same but the VPS's total and rate bound (ufw_connlimit with 0): what Traefik's total alone
                  stops

Each configuration: the flood from 300 addresses x 50 connections, then the same 15,000 from one address
(tests/support/loadgen_go/cmd/floodgen: open loop, a TLS handshake and `GET /slower` each, the NAS's backend holding
it 6 s, 10 s deadline). Meanwhile, every second (many_sources.Watch): the LAN's probes to the NAS on the LAN (site,
auth behind Traefik; sshd beside it), an ordinary client through the VPS (the public path), and on the NAS Traefik's
CPU, conntrack, its sockets, open files and threads. Recorded per flood: the generator's figures and verdict (a run it
shaped itself is invalid and reported as such, never as a result), the probes during the flood (served, latency),
the seconds until the LAN and the public path answer every probe again (5 s in a row), Traefik's health and restarts,
the NAS's peaks.

Prints a table and saves JSON (machine info, versions, every run) to benchmarks/results/many_sources-STAMP.json.
Traffic only to the lab's own containers, from its private 10.201.0.0/22; every flood bounded in count and time.

  bench_many_sources.py [--sources 300] [--per-source 50] [--rate 500] [--configs per-address,bounds,traefik-total]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import edge  # noqa: E402
import floodgen  # noqa: E402
import many_sources  # noqa: E402

PREFIX = "flood"
NAS_CPU, CLIENT_CPU = 1, 0
QUIET_S, MIN_WATCH_S, MAX_WATCH_S = 10, 20, 90
TIMEOUT_S = 10.0
TUNNEL_TOTAL, TUNNEL_PORT = 200, 10443
PER_ADDRESS = {"vps_connlimit_total": 0, "vps_connlimit_rate": 0, "traefik_inflight_tunnel_total": 0}
BOUNDS = {"vps_connlimit_total": 400, "vps_connlimit_rate": 4, "vps_connlimit_burst": 100,
          "traefik_inflight_tunnel_total": TUNNEL_TOTAL, "traefik_inflight_tunnel_port": TUNNEL_PORT}


def sh(*argv, check=True, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, **kw)


def site(inventory, extra):
    out = subprocess.run(["ansible-playbook", "-i", inventory, os.path.join(ROOT, "site.yml"), "-e", json.dumps(extra)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200, check=False)
    if out.returncode:
        raise RuntimeError("site.yml failed:\n" + out.stdout[-4000:])


def pin(lab):
    sh("docker", "update", "--cpuset-cpus", str(NAS_CPU), lab.nas)
    for other in (lab.vps, lab.client, lab.public, lab.lan):
        sh("docker", "update", "--cpuset-cpus", str(CLIENT_CPU), other)
    # the flooding client's side of 15,000 connections: ports to spare
    sh("nsenter", "-t", str(lab.pid(lab.client)), "-n", "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65000")


def configure(name, lab, inventory):
    if name == "per-address":
        site(inventory, PER_ADDRESS)
    elif name == "bounds":
        site(inventory, BOUNDS)
        many_sources.tunnel_steps(lab, TUNNEL_PORT)
    elif name == "traefik-total":
        r = adhoc.run_module("ufw_connlimit", {"ports": [80, 443], "limit": 100, "total": 0, "rate": 0},
                             target=lab.vps, inventory=inventory, become=True)
        if r.get("failed"):
            raise RuntimeError(r.get("msg"))
    time.sleep(10)  # Traefik re-created or reloaded: its first health checks


def one(lab, config, flood_name, n_sources, per_source, rate):
    seconds = n_sources * per_source / float(rate)
    health_before = many_sources.traefik_health(lab)
    watch = many_sources.Watch(lab, QUIET_S + seconds + TIMEOUT_S + MAX_WATCH_S)
    time.sleep(QUIET_S)
    start = time.time()
    gen = many_sources.flood(lab, n_sources, per_source, rate, mode="tls", timeout=TIMEOUT_S, cpus={CLIENT_CPU})
    end = start + seconds
    way_in = many_sources.way_in(lab, edge.ssh_ports(PREFIX)["vps"])
    while time.time() < end + MAX_WATCH_S:   # until both answer again (at least MIN_WATCH_S), MAX_WATCH_S at most
        time.sleep(5)
        if time.time() < end + MIN_WATCH_S:
            continue
        partial = many_sources.summary(watch.peek(), start, end)
        if partial["lan_again_s"] is not None and partial["public_again_s"] is not None:
            break
    watched = watch.collect()
    out = many_sources.summary(watched, start, end)
    out.update(config=config, flood=flood_name, flood_window=[round(start - watch.t0, 1), round(end - watch.t0, 1)],
               generator=dict((k, v) for k, v in gen.items() if k != "timeline"), timeline=gen.get("timeline"),
               way_in=way_in, health_before=health_before, health_after=many_sources.traefik_health(lab),
               seconds=rows(watched))
    return out


def rows(watched):
    """Per second from the watch's start: the LAN's and the public path's probes, and the NAS's sample."""
    t0, out = watched["t0"], {}
    for s in watched["samples"]:
        out.setdefault(int(s["t"] - t0), {}).update((k, s.get(k)) for k in (
            "cpu_pct", "conntrack", "sockets", "time_wait", "fds", "threads"))
    for key, probes_ in (("lan", watched["lan"]), ("public", watched["public"])):
        for p in probes_:
            row = out.setdefault(int(p["t"] - t0), {})
            row["%s_sent" % key] = row.get("%s_sent" % key, 0) + 1
            row["%s_served" % key] = row.get("%s_served" % key, 0) + int(many_sources.served(p))
            row["%s_latency_max" % key] = max(row.get("%s_latency_max" % key, 0), p["seconds"])
    return [dict(v, t=k) for k, v in sorted(out.items())]


def versions(lab):
    def out(*argv):
        return sh(*argv, check=False).stdout.strip()
    return {"docker_host": out("docker", "version", "-f", "{{.Server.Version}}"),
            "docker_nas": out("docker", "exec", lab.nas, "docker", "version", "-f", "{{.Server.Version}}"),
            "traefik": out("docker", "exec", lab.nas, "docker", "exec", "traefik", "traefik", "version").splitlines()[:2],
            "nginx_vps": out("docker", "exec", lab.vps, "nginx", "-v") or sh("docker", "exec", lab.vps, "nginx", "-v",
                                                                              check=False).stderr.strip(),
            "iptables_vps": out("docker", "exec", lab.vps, "iptables", "--version"),
            "kernel": platform.release(), "floodgen": floodgen.build()}


def machine():
    with open("/proc/cpuinfo") as f:
        model = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")][:1]
    return {"cpus": os.cpu_count(), "cpu_model": model[0] if model else None, "platform": platform.platform(),
            "python": platform.python_version(), "date": time.strftime("%FT%T%z")}


def table(result):
    """The result as printed, every figure from the saved runs."""
    lines = ["%-14s %-10s %-6s %-33s %-30s %-26s %-14s %-14s %s" % (
        "config", "flood", "valid", "flood: connected/reset/2xx/429/failed", "LAN probes served (site/auth/ssh)",
        "LAN latency p50/max (site)", "public served", "answers again", "NAS peaks: conntrack/fds/threads/open "
        "sockets, Traefik health")]
    for r in result["runs"]:
        g, lan = r["generator"], r["lan_during"]
        lines.append("%-14s %-10s %-6s %-33s %-30s %-26s %-14s %-14s %s/%s/%s/%s, %s" % (
            r["config"], r["flood"], "yes" if g["valid"] else "NO",
            "%d/%d/%d/%d/%d" % (g["connected"], g["refused"], g["ok_2xx"], g["r429"], g["failed"] - g["refused"]),
            "/".join("%d of %d" % (lan[t]["served"], lan[t]["sent"]) for t in ("site", "auth", "ssh")),
            "%s / %s s" % (lan["site"]["latency_p50_s"], lan["site"]["latency_max_s"]),
            "%d of %d" % (r["public_during"]["served"], r["public_during"]["sent"]),
            "LAN %s s, public %s s" % (r["lan_again_s"], r["public_again_s"]),
            r["peak"]["conntrack"], r["peak"]["fds"], r["peak"]["threads"], r["peak"]["open_sockets"],
            r["health_after"].split(" started=")[0]))
    invalid = ["%s %s: %s" % (r["config"], r["flood"], r["generator"]["invalid_because"]) for r in result["runs"]
               if not r["generator"]["valid"]]
    return lines + ["invalid (not a result): %s" % w for w in invalid]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=300)
    ap.add_argument("--per-source", type=int, default=50)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--configs", default="per-address,bounds,traefik-total")
    ap.add_argument("--table", metavar="RESULT", help="print a saved result's table")
    a = ap.parse_args(argv)
    if a.table:
        with open(a.table) as f:
            print("\n".join(table(json.load(f))))
        return 0
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = os.path.join(ROOT, "benchmarks", "results", "many_sources-%s.json" % stamp)
    floods = [("many", a.sources, a.per_source), ("one", 1, a.sources * a.per_source)]
    result = {"machine": machine(), "conditions": {
        "prefix": PREFIX, "configs": a.configs.split(","), "floods": floods, "rate": a.rate, "mode": "tls",
        "path": many_sources.PATH, "timeout_s": TIMEOUT_S, "per_address": PER_ADDRESS, "bounds": BOUNDS,
        "nas_cpu": NAS_CPU, "client_cpu": CLIENT_CPU, "quiet_s": QUIET_S, "watch_s": [MIN_WATCH_S, MAX_WATCH_S],
        "healthy_run_s": many_sources.HEALTHY_RUN_S}, "runs": []}
    inventory = many_sources.inventory(PREFIX, os.path.join(tempfile.mkdtemp(), "hosts.yml"))
    try:
        edge.up(PREFIX)
        lab = many_sources.Lab(PREFIX)
        pin(lab)
        result["versions"] = None
        for config in a.configs.split(","):
            print("%s: configuring" % config, flush=True)
            configure(config, lab, inventory)
            with many_sources.sources(lab):
                for flood_name, n, each in floods:
                    print("  %s: %d source(s) x %d at %g/s" % (flood_name, n, each, a.rate), flush=True)
                    run = one(lab, config, flood_name, n, each, a.rate)
                    print("  " + floodgen.summary(dict(run["generator"], valid=run["generator"]["valid"])), flush=True)
                    result["runs"].append(run)
                    result["versions"] = result["versions"] or versions(lab)
                    with open(out, "w") as f:  # after each run: a later failure keeps what was measured
                        json.dump(result, f, indent=1)
    finally:
        edge.down(PREFIX)
    result["table"] = table(result)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(result["table"]))
    print("saved %s" % os.path.relpath(out, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
