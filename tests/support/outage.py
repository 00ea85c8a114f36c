"""Seed 001's ladder, measured: a flood from one internet client through the
VPS and the tunnel against the NAS's Traefik (wrk, many TLS connections, slow
and fast pages) while monitoring-like probes run from the LAN, with the NAS
sampled every second (Traefik's CPU, conntrack entries, TIME_WAIT/FIN_WAIT
sockets). Used by
benchmarks/bench_edge_outage.py and the demo.

Traffic goes only to the lab's own VPS and NAS containers (lab/edge.py);
every loop is bounded by its duration.
"""
import json
import os
import subprocess
import time

import probes

NAS, TRAEFIK = "lab-nas", "traefik"
FLOODER, PROBER = "lab-client1", "lab-lan-client"  # the internet client; the LAN's monitoring


def sh(*argv, check=True, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, **kw)


def traefik_pid():
    return int(sh("docker", "exec", NAS, "docker", "inspect", "-f", "{{.State.Pid}}", TRAEFIK).stdout)


def cap_cpu(cpus):
    """Seed 001's NAS ran Traefik near a full share of a small CPU: cap it."""
    sh("docker", "exec", NAS, "docker", "update", "--cpus", str(cpus), TRAEFIK)


def start_in(container, program, args, out):
    path = probes.put_program(_container(container), program)
    sh("docker", "exec", "-d", container, "sh", "-c", "python3 %s %s > %s 2>/dev/null" % (
        path, " ".join(str(a) for a in args), out))


def _container(name):
    import docker
    return docker.from_env().containers.get(name)


def read_lines(container, path):
    out = sh("docker", "exec", container, "cat", path, check=False).stdout
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def run(flood_address, nas_address, flood_s=60, before_s=10, after_s=60, connections=500, interval=1.0, label="run"):
    """One ladder: the flood to `flood_address` (the VPS), the probes to
    `nas_address`. Returns dict(seconds=[per-second rows], summary={...})."""
    total = before_s + flood_s + after_s
    tag = "%s-%d" % (label, int(time.time()))
    pid = traefik_pid()
    # the NAS's own view, and the monitoring: a probe per backend every second, and a "scrape"
    start_in(NAS, "host_sampler.py", [pid, total], "/tmp/sample-%s.jsonl" % tag)
    start_in(PROBER, "probe_loop.py", [nas_address, 443, total, interval, "site=site.nas.lab/", "auth=auth.nas.lab/",
                                       "scrape=site.nas.lab/status"], "/tmp/probe-%s.jsonl" % tag)
    t0 = time.time()
    time.sleep(before_s)
    half = connections // 2
    flood = []
    for path, extra in (("/slow", []), ("/", ["-H", "Connection: close"])):  # held requests; a new TLS handshake each
        flood.append(subprocess.Popen(
            ["docker", "exec", FLOODER, "wrk", "-t1", "-c%d" % half, "-d%ds" % flood_s, "--timeout", "10s",
             "-H", "Host: site.nas.lab"] + extra + ["https://%s%s" % (flood_address, path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    flood_start = time.time()
    outputs = [p.communicate(timeout=flood_s + 60)[0] for p in flood]
    flood_end = time.time()
    time.sleep(max(0.0, t0 + total + 3 - time.time()))
    samples = read_lines(NAS, "/tmp/sample-%s.jsonl" % tag)
    probe_rows = read_lines(PROBER, "/tmp/probe-%s.jsonl" % tag)
    return summarize(t0, flood_start, flood_end, samples, probe_rows, outputs)


def _wrk_requests(output):
    for line in output.splitlines():
        if "requests in" in line:
            return int(line.split()[0])
    return 0


def summarize(t0, flood_start, flood_end, samples, probe_rows, wrk_outputs):
    seconds = {}
    for s in samples:
        seconds.setdefault(int(s["t"] - t0), {}).update(
            cpu_pct=s["cpu_pct"], conntrack=s["conntrack"], time_wait=s["time_wait"], fin_wait=s["fin_wait"])
    for p in probe_rows:
        row = seconds.setdefault(int(p["t"] - t0), {})
        row.setdefault("probes", []).append(p)
    rows = []
    for sec in sorted(seconds):
        row = dict(seconds[sec], t=sec)
        ps = row.pop("probes", [])
        for target in ("site", "auth", "scrape"):
            mine = [p for p in ps if p["target"] == target]
            row["%s_ok" % target] = sum(1 for p in mine if p["code"] and p["code"] < 500)
            row["%s_sent" % target] = len(mine)
            row["%s_latency" % target] = round(max([p["seconds"] for p in mine] or [0]), 3)
        rows.append(row)
    start, end = int(flood_start - t0), int(flood_end - t0)

    def healthy(row):
        return all(row.get("%s_sent" % t, 0) == row.get("%s_ok" % t, 0) for t in ("site", "auth"))

    during = [p for p in probe_rows if flood_start <= p["t"] <= flood_end]
    outage = [r["t"] for r in rows if start <= r["t"] <= end and not healthy(r)]
    recovered = None
    for r in rows:
        if r["t"] < end:
            continue
        later = [x for x in rows if r["t"] <= x["t"] < r["t"] + 5]
        if len(later) >= 5 and all(healthy(x) for x in later):
            recovered = r["t"] - end
            break
    return {"seconds": rows, "flood": [start, end],
            "summary": {"probes_during_flood": len(during),
                        "probes_answered_during_flood": sum(1 for p in during if p["code"] and p["code"] < 500),
                        "probes_answered_pct": round(100.0 * sum(1 for p in during if p["code"] and p["code"] < 500)
                                                     / max(1, len(during)), 1),
                        "seconds_with_failed_probes_during_flood": len(outage),
                        "healthy_after_flood_s": recovered,
                        "worst_probe_latency_s": max([p["seconds"] for p in during] or [0]),
                        "peak_cpu_pct": max([r.get("cpu_pct") or 0 for r in rows] or [0]),
                        "peak_conntrack": max([r.get("conntrack") or 0 for r in rows] or [0]),
                        "peak_time_wait": max([r.get("time_wait") or 0 for r in rows] or [0]),
                        "flood_requests": sum(_wrk_requests(o) for o in wrk_outputs)}}


def plot(runs, path, title):
    """Before and after, one above the other: probe success and latency, CPU,
    conntrack and TIME_WAIT, per second, the flood shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(4, len(runs), figsize=(7 * len(runs), 11), sharex=True, squeeze=False)
    for col, (name, run_) in enumerate(runs):
        rows = run_["seconds"]
        t = [r["t"] for r in rows]
        ax = axes[0][col]
        for target in ("site", "auth", "scrape"):
            ax.plot(t, [100.0 * r["%s_ok" % target] / max(1, r["%s_sent" % target]) for r in rows], label=target)
        ax.set_ylabel("probes answered %")
        ax.set_title("%s: %s" % (title, name))
        ax.legend(loc="lower left")
        ax = axes[1][col]
        for target in ("site", "auth"):
            ax.plot(t, [r["%s_latency" % target] for r in rows], label=target)
        ax.set_ylabel("slowest probe s")
        axes[2][col].plot(t, [r.get("cpu_pct") or 0 for r in rows], color="tab:red")
        axes[2][col].set_ylabel("Traefik CPU %")
        ax = axes[3][col]
        ax.plot(t, [r.get("conntrack") or 0 for r in rows], label="conntrack")
        ax.plot(t, [r.get("time_wait") or 0 for r in rows], label="TIME_WAIT")
        ax.plot(t, [r.get("fin_wait") or 0 for r in rows], label="FIN_WAIT")
        ax.set_ylabel("entries")
        ax.set_xlabel("seconds")
        ax.legend(loc="upper left")
        for row in axes:
            row[col].axvspan(run_["flood"][0], run_["flood"][1], color="grey", alpha=0.15)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
