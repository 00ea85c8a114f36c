#!/usr/bin/env python
"""Seed 001's wedge, tried on this machine: a NAS that can be overwhelmed as
the seed's was, the seed's ladder open-loop from the LAN, and what the flood
leaves behind, second by second.

The NAS (lab/edge.py's: its own Docker engine, Traefik publishing 443 in front
of "site" and "auth") is pinned to one core (CPU 1), with its network receive
processing steered to that core too (RPS on every interface of the NAS's and
Traefik's namespaces); a neighbour on the NAS parses Traefik's access log line
by line as CrowdSec does (JSON, then a set of regular expressions over path
and user agent). The LAN client (generator and probes) is pinned to CPU 0, its
receive processing steered there.

Each run: 10 s quiet, then the ladder (tests/support/loadgen_go/cmd/tlsgen: new TLS
connections opened at a fixed rate, each holding a slow request, /slower:
6 s; steps back to back), then up to --watch seconds until every probe behind
Traefik has answered HEALTHY_RUN_S seconds in a row (at least --min-watch).
Meanwhile, every second: probes from the LAN of the services behind Traefik
(site, auth, and a "scrape") and beside it (the NAS's sshd), and on the NAS
(host_sampler.py --cpu 1): its core's user/system/softirq time, conntrack in
the NAS's and Traefik's namespaces, Traefik's sockets, TIME_WAIT, orphans,
listen overflows and its CPU throttling.

Configurations, in ABBA order (--order): before (the admin's NAS as it was),
after (site.yml with the drain's conntrack timer on). tests/support/wedge.py
judges each run: reproduced only when dark for 60 s after the flood with the
kernel's CPU above user CPU meanwhile; a run whose generator, prober or
sampler failed is invalid and reported as such.

Prints and saves JSON (machine info, versions, every run's per-second rows)
and a PNG of the time series to benchmarks/results/. Traffic goes only to the
lab's own containers; every step is bounded in time.

  bench_nas_wedge.py [--ladder 100,200,400,800] [--step 30] [--watch 600] [--order before,after,after,before]
                     [--via lan|vps]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import edge  # noqa: E402
import outage  # noqa: E402
import tlsgen  # noqa: E402
import wedge  # noqa: E402

NAS_CPU, CLIENT_CPU = 1, 0
BEHIND, BESIDE = ["site", "auth", "scrape"], ["ssh"]
PATH, SNI, TIMEOUT = "/slower", "site.nas.lab", 10
MAX_OPEN = 19000  # under the client's open-files limit (this machine's hard limit is 20,000): the bound speaks first
QUIET_S = 10
AFTER_VARS = {"tcp_drain_conntrack": True}  # the drain's conntrack timer too (off by default)
# a neighbour that reads Traefik's access log as CrowdSec's parsers do: each line decoded, then tested
LOG_PARSER = r'''
import json, re, sys
RULES = [re.compile(p, re.I) for p in (
    r"\.(env|git|svn|htaccess|DS_Store)", r"wp-(login|admin|content)", r"(union|select).+(from|where)",
    r"<script", r"\.\./", r"/etc/passwd", r"(sqlmap|nikto|nmap|masscan|zgrab|nuclei)", r"phpmyadmin",
    r"/cgi-bin/", r"(\$\{jndi:|%24%7Bjndi)", r"\b(curl|wget|python-requests|go-http-client)\b", r"/admin",
    r"\.(php|asp|aspx|jsp)\b", r"/\.well-known/", r"(cmd|exec|shell)=")]
seen = hits = 0
for line in sys.stdin:
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    seen += 1
    text = " ".join(str(entry.get(k, "")) for k in ("RequestPath", "request_User-Agent", "RequestHost",
                                                     "ClientHost", "DownstreamStatus"))
    hits += sum(1 for r in RULES if r.search(text))
'''


def sh(*argv, check=True, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, **kw)


def host_pid(container):
    return sh("docker", "inspect", "-f", "{{.State.Pid}}", container).stdout.strip()


def steer(exec_prefix, pid, mask):
    """RPS: receive processing of every interface in the namespace of `pid` on the cores of `mask` (a fresh sysfs
    in a mount namespace of its own, so the namespace's own interfaces show)."""
    script = ("d=$(mktemp -d) && mount -t sysfs sysfs $d && for f in $d/class/net/*/queues/rx-*/rps_cpus; do "
              "echo %x > $f; done; n=$(ls $d/class/net | wc -l); umount $d; rmdir $d; echo $n" % mask)
    return sh(*(exec_prefix + ["nsenter", "-t", str(pid), "-n", "unshare", "-m", "sh", "-c", script])).stdout.strip()


def rig(lab):
    """The NAS on one core with its receive processing; the LAN client on the other; the log-parsing neighbour."""
    nas, client = lab["nas"], "lab-lan-client"
    sh("docker", "update", "--cpuset-cpus", str(NAS_CPU), nas)
    for other in ["lab-vps", "lab-client1", "lab-client2", client]:
        sh("docker", "update", "--cpuset-cpus", str(CLIENT_CPU), other)
    nas_pid = sh("docker", "exec", nas, "pgrep", "-o", "-x", "systemd").stdout.strip() or "1"
    steered = {"nas": steer(["docker", "exec", nas], nas_pid, 1 << NAS_CPU),
               "traefik": steer(["docker", "exec", nas], outage.traefik_pid(), 1 << NAS_CPU)}
    for name in (client, "lab-client1"):  # the LAN's flood and probes; the internet's flood (--via vps)
        steered[name] = steer([], host_pid(name), 1 << CLIENT_CPU)
        # a client's side of 30,000 connections a step: ports to spare, and their TIME_WAIT reused
        sh("nsenter", "-t", host_pid(name), "-n", "sh", "-c", "sysctl -qw net.ipv4.ip_local_port_range='1024 65000' "
           "net.ipv4.tcp_tw_reuse=1")
    sh("docker", "exec", "-i", nas, "sh", "-c", "cat > /usr/local/bin/homelab-edge-bench-logparser.py",
       input=LOG_PARSER)
    sh("docker", "exec", nas, "systemctl", "stop", "homelab-edge-bench-logparser", check=False)
    sh("docker", "exec", nas, "systemd-run", "--unit", "homelab-edge-bench-logparser", "--collect", "-p",
       "CPUAccounting=yes", "sh", "-c",
       "docker logs -f --since 1s traefik 2>&1 | python3 /usr/local/bin/homelab-edge-bench-logparser.py")
    return {"nas_cpu": NAS_CPU, "client_cpu": CLIENT_CPU, "rps_interfaces": steered}


def configure(name, lab):
    """before: a fresh edge lab (the admin's NAS as it was); after: site.yml on it."""
    if name == "before":
        lab.update(edge.up())
    else:
        out = sh("ansible-playbook", "-i", os.path.join(ROOT, "inventories", "lab", "hosts.yml"),
                 os.path.join(ROOT, "site.yml"), "--limit", "lab-vps,lab-nas", "-e", json.dumps(AFTER_VARS),
                 check=False, timeout=900)
        if out.returncode:
            raise RuntimeError(out.stdout[-3000:])
        time.sleep(10)  # Traefik re-created: its first health checks
    return rig(lab)


def ladder(flood_from, address, rates, step_s, t_start):
    """Each step a generator run in the LAN client, back to back on the clock (a step's last connections may
    still be open when the next starts). Returns [(start epoch, result)] in order."""
    results = [None] * len(rates)

    def step(i, rate):
        time.sleep(max(0.0, t_start + i * step_s - time.time()))
        started = time.time()
        results[i] = (started, tlsgen.run(address, 443, SNI, PATH, rate, step_s, TIMEOUT, max_open=MAX_OPEN,
                                          timeline=True, container=flood_from))
    threads = [threading.Thread(target=step, args=(i, r)) for i, r in enumerate(rates)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(step_s * len(rates) + TIMEOUT + 120)
    return results


def one_run(label, lab, rates, step_s, watch_s, min_watch_s, via):
    nas_address = lab["nas_lan"]
    flood_from, flood_to = ("lab-client1", lab["vps_wan"]) if via == "vps" else ("lab-lan-client", nas_address)
    flood_s = step_s * len(rates)
    total = QUIET_S + flood_s + watch_s
    tag = "%s-%d" % (label, int(time.time()))
    outage.start_in(lab["nas"], "host_sampler.py", [outage.traefik_pid(), total, "--cpu", NAS_CPU],
                    "/tmp/sample-%s.jsonl" % tag)
    outage.start_in("lab-lan-client", "probe_loop.py", [nas_address, 443, total, 1.0, "site=site.nas.lab/",
                                                         "auth=auth.nas.lab/", "scrape=site.nas.lab/status",
                                                         "ssh=tcp:22"], "/tmp/probe-%s.jsonl" % tag)
    t0 = time.time()
    steps = ladder(flood_from, flood_to, rates, step_s, t0 + QUIET_S)
    flood_end = t0 + QUIET_S + flood_s
    # watch until recovered (at least min_watch_s), at most watch_s
    while time.time() < flood_end + watch_s:
        time.sleep(5)
        seen = time.time()
        if seen < flood_end + min_watch_s:
            continue
        rows = wedge.rows(t0, int(seen - t0) - 1, [{"t": t0 + s, "core": None} for s in range(int(seen - t0))],
                          outage.read_lines("lab-lan-client", "/tmp/probe-%s.jsonl" % tag), [], BEHIND, BESIDE)
        if wedge.aftermath(rows, int(flood_end - t0), BEHIND)["recovered_after_flood_s"] is not None:
            break
    seconds = int(time.time() - t0)
    for container, program in ((lab["nas"], "host_sampler.py"), ("lab-lan-client", "probe_loop.py")):
        sh("docker", "exec", container, "pkill", "-f", program, check=False)
    time.sleep(2)
    samples = outage.read_lines(lab["nas"], "/tmp/sample-%s.jsonl" % tag)
    probe_rows = outage.read_lines("lab-lan-client", "/tmp/probe-%s.jsonl" % tag)
    gens = [r for dummy, r in steps if r]
    rows = wedge.rows(t0, seconds, samples, probe_rows,
                      [(start, r.get("timeline") or []) for start, r in steps if r], BEHIND, BESIDE)
    verdict = wedge.verdict(rows, int(flood_end - t0), BEHIND, BESIDE, gens if len(gens) == len(rates) else [])
    parser = sh("docker", "exec", lab["nas"], "systemctl", "show", "-p", "CPUUsageNSec", "--value",
                "homelab-edge-bench-logparser", check=False).stdout.strip()
    return {"label": label, "via": via, "flood": [QUIET_S, QUIET_S + flood_s], "rates": rates, "step_s": step_s,
            "generator": [dict((k, v) for k, v in r.items() if k != "timeline") for r in gens],
            "verdict": verdict, "log_parser_cpu_s": round(int(parser) / 1e9, 1) if parser.isdigit() else None,
            "traefik_answers_during_flood": outage.traefik_statuses(t0 + QUIET_S, flood_end), "seconds": rows}


def versions(lab):
    def out(*argv):
        return sh(*argv, check=False).stdout.strip()
    return {"docker_host": out("docker", "version", "-f", "{{.Server.Version}}"),
            "docker_nas": out("docker", "exec", lab["nas"], "docker", "version", "-f", "{{.Server.Version}}"),
            "traefik": out("docker", "exec", lab["nas"], "docker", "exec", "traefik", "traefik",
                           "version").splitlines()[:2],
            "kernel": platform.release(), "tlsgen": tlsgen.build()}


def machine():
    with open("/proc/cpuinfo") as f:
        model = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")][:1]
    return {"cpus": os.cpu_count(), "cpu_model": model[0] if model else None, "platform": platform.platform(),
            "python": platform.python_version(), "date": time.strftime("%FT%T%z")}


def table(result):
    """The result as printed: per run its verdict and the NAS's state at and after the flood's end, then per step
    what the generator offered and got (every figure from the run's saved rows; computed only where labelled)."""
    lines = ["run          valid  dark after flood  recovered after  core during flood usr/sys/sirq/idle %  "
             "core 30-90 s after  conntrack at end / +30 / +60 / +85 s  TIME_WAIT peak  orphans at end  overflows"]
    steps = []
    for n, run in enumerate(result["runs"], 1):
        v, rows, (start, end) = run["verdict"], run["seconds"], run["flood"]
        core = lambda a, b: "/".join("%s" % wedge.mean_of(rows, "core_" + m, a, b)  # noqa: E731
                                     for m in ("user", "system", "softirq", "idle"))
        conntrack = " / ".join("%s" % wedge.value_at(rows, "conntrack", end + d) for d in (0, 30, 60, 85))
        lines.append("%-12s %-6s %-17s %-16s %-36s %-19s %-38s %-15s %-15s %s" % (
            "%d %s" % (n, run["label"]), "yes" if v["valid"] else "NO", "%s s" % v["longest_dark_after_flood_s"],
            "%s s" % v["recovered_after_flood_s"], core(start, end), core(end + 30, end + 90), conntrack,
            max([r.get("ns_time_wait") or 0 for r in rows]), wedge.value_at(rows, "ns_orphan", end),
            sum(r.get("listen_overflows") or 0 for r in rows)))
        for g in run["generator"]:
            steps.append("%-12s %5d/s: started %6d, 2xx %6d, 429 %6d, failed %6d, peak open %5d; generator: lateness "
                         "p99 %.4f s, CPU %.1f s of %.1f s, %s" % (
                             "%d %s" % (n, run["label"]), g["rate"], g["started"], g["ok_2xx"], g["r429"], g["failed"],
                             g["peak_open"], g["lateness_p99_s"] or 0, g["user_s"] + g["system_s"], g["wall_s"],
                             "valid" if g["valid"] else "INVALID (%s)" % g["invalid_because"]))
    invalid = [r["verdict"]["invalid_because"] for r in result["runs"] if not r["verdict"]["valid"]]
    return lines + ["", "the ladder's steps (connections a second, each holding %s for up to %s s):" % (
        result["conditions"]["path"], result["conditions"]["connection_timeout_s"])] + steps + \
        ["", "reproduced (dark >= %d s after the flood, kernel CPU above user meanwhile): %s" % (
            wedge.DARK_BAR_S, result["reproduced"])] + ["invalid: %s" % w for w in invalid]


def plot(runs, path):
    """Per run, one column: probes behind and beside Traefik, the NAS's core by mode, conntrack and Traefik's
    sockets, the flood per second; the flood shaded, the dark seconds after it marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(4, len(runs), figsize=(6 * len(runs), 12), sharex="col", squeeze=False)
    for col, run in enumerate(runs):
        rows = run["seconds"]
        t = [r["t"] for r in rows]
        ax = axes[0][col]
        for name in BEHIND + BESIDE:
            ax.plot(t, [100.0 * r["%s_ok" % name] / r["%s_sent" % name] if r["%s_sent" % name] else float("nan")
                        for r in rows], label=name + (" (beside)" if name in BESIDE else ""))
        v = run["verdict"]
        ax.set_title("%s: dark %s s after the flood, recovered after %s s%s" % (
            run["label"], v.get("longest_dark_after_flood_s"), v.get("recovered_after_flood_s"),
            "" if v["valid"] else " (INVALID)"), fontsize=9)
        ax.set_ylabel("probes answered %")
        ax.legend(loc="lower left", fontsize=7)
        ax = axes[1][col]
        for mode in ("user", "system", "softirq", "idle"):
            ax.plot(t, [r.get("core_%s" % mode) for r in rows], label=mode)
        ax.set_ylabel("NAS core %d, %% by mode" % NAS_CPU)
        ax.legend(loc="upper right", fontsize=7)
        ax = axes[2][col]
        for key, label in (("conntrack", "conntrack (NAS)"), ("ns_conntrack", "conntrack (Traefik's ns)"),
                           ("ns_time_wait", "TIME_WAIT"), ("ns_orphan", "orphans"), ("ns_tcp_inuse", "TCP in use")):
            ax.plot(t, [r.get(key) for r in rows], label=label)
        ax.set_ylabel("entries, Traefik's namespace")
        ax.legend(loc="upper right", fontsize=7)
        ax = axes[3][col]
        for key in ("started", "ok_2xx", "r429", "failed"):
            ax.plot(t, [r.get("flood_%s" % key, 0) for r in rows], label=key)
        ax.set_ylabel("flood connections / s")
        ax.set_xlabel("seconds")
        ax.legend(loc="upper right", fontsize=7)
        for row in axes:
            row[col].axvspan(run["flood"][0], run["flood"][1], color="grey", alpha=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ladder", default="100,200,400,800", help="connections a second, one step each")
    ap.add_argument("--step", type=int, default=30)
    ap.add_argument("--watch", type=int, default=600)
    ap.add_argument("--min-watch", type=int, default=90)
    ap.add_argument("--order", default="before,after,after,before")
    ap.add_argument("--via", choices=["lan", "vps"], default="lan",
                    help="the flood from the LAN straight to the NAS (the seed's bypass), or from the internet through "
                         "the VPS and the tunnel")
    ap.add_argument("--table", metavar="RESULT", help="print a saved result's table (and save it into the result)")
    a = ap.parse_args(argv)
    if a.table:
        with open(a.table) as f:
            result = json.load(f)
        result["wedge_table"] = table(result)
        with open(a.table, "w") as f:
            json.dump(result, f, indent=1)
        print("\n".join(result["wedge_table"]))
        return 0
    rates = [int(r) for r in a.ladder.split(",")]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = os.path.join(ROOT, "benchmarks", "results", "nas_wedge-%s%s.json" % ("vps-" if a.via == "vps" else "", stamp))
    result = {"machine": machine(), "conditions": {
        "ladder": rates, "step_s": a.step, "path": PATH, "connection_timeout_s": TIMEOUT, "max_open": MAX_OPEN,
        "order": a.order, "via": a.via,
        "after_vars": AFTER_VARS, "nas_cpu": NAS_CPU, "client_cpu": CLIENT_CPU,
        "bar": {"dark_after_flood_s": wedge.DARK_BAR_S, "healthy_run_s": wedge.HEALTHY_RUN_S}}, "runs": []}
    lab, current = {}, None
    try:
        for label in a.order.split(","):
            if label != current:
                result["rig"] = configure(label, lab)
                current = label
            print("%s: ladder %s x %d s via %s, then up to %d s" % (label, rates, a.step, a.via, a.watch), flush=True)
            run = one_run(label, lab, rates, a.step, a.watch, a.min_watch, a.via)
            v = run["verdict"]
            print("  dark %s s after the flood (longest %s), recovered after %s s, kernel %s %% vs user %s %% "
                  "while dark; valid %s %s" % (v["dark_after_flood_s"], v["longest_dark_after_flood_s"],
                                               v["recovered_after_flood_s"], v["cpu_while_dark"]["kernel"],
                                               v["cpu_while_dark"]["user"], v["valid"], v["invalid_because"] or ""),
                  flush=True)
            result["runs"].append(run)
            result.setdefault("versions", versions(lab))
            with open(out, "w") as f:  # after each run: a later failure keeps what was measured
                json.dump(result, f, indent=1)
    finally:
        edge.down()
    result["reproduced"] = any(r["verdict"]["reproduced"] for r in result["runs"] if r["label"] == "before")
    result["picture"] = os.path.relpath(plot(result["runs"], out.replace(".json", ".png")), ROOT)
    result["wedge_table"] = table(result)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(result["wedge_table"]))
    print("saved %s and %s" % (os.path.relpath(out, ROOT), result["picture"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
