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
import re
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
    result = summarize(t0, flood_start, flood_end, samples, probe_rows, outputs)
    result["summary"]["traefik_answers_during_flood"] = traefik_statuses(flood_start, flood_end)
    return result


def traefik_statuses(since, until):
    """What Traefik's access log (JSON) says it answered between two times,
    by status class: 2xx, 429, other codes; the flood's own view from wrk
    cannot tell a 429 from a 502."""
    out = sh("docker", "exec", NAS, "docker", "logs", "--since", str(int(since)), "--until", str(int(until) + 1),
             TRAEFIK, check=False).stdout
    counts = {"2xx": 0, "429": 0, "other": 0}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        status = json.loads(line).get("DownstreamStatus")
        if not status:
            continue
        counts["2xx" if 200 <= status < 300 else "429" if status == 429 else "other"] += 1
    return counts


def wrk_counts(output):
    """wrk's summary: requests completed, non-2xx/3xx answers among them,
    socket errors (connect, read, write) and timeouts."""
    out = {"requests": 0, "non_2xx_3xx": 0, "connect_errors": 0, "read_errors": 0, "write_errors": 0, "timeouts": 0}
    for line in output.splitlines():
        s = line.strip()
        m = re.match(r"(\d+) requests in", s)
        if m:
            out["requests"] = int(m.group(1))
        m = re.match(r"Non-2xx or 3xx responses: (\d+)", s)
        if m:
            out["non_2xx_3xx"] = int(m.group(1))
        m = re.match(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", s)
        if m:
            out.update(connect_errors=int(m.group(1)), read_errors=int(m.group(2)), write_errors=int(m.group(3)),
                       timeouts=int(m.group(4)))
    return out


def probe_codes(probes_):
    """Probes by outcome: 2xx, 429, other HTTP answers, timeouts, other errors."""
    out = {"2xx": 0, "429": 0, "other_http": 0, "timeout": 0, "error": 0}
    for p in probes_:
        code = p.get("code")
        if code is None:
            out["timeout" if p.get("error") == "timeout" else "error"] += 1
        elif 200 <= code < 300:
            out["2xx"] += 1
        elif code == 429:
            out["429"] += 1
        else:
            out["other_http"] += 1
    return out


def served(p):
    """A probe the monitoring would call up: a 2xx answer (a 429 is not); a service beside Traefik (tcp:PORT):
    its banner came."""
    if "ok" in p:
        return bool(p["ok"])
    return p.get("code") is not None and 200 <= p["code"] < 300


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
            row["%s_ok" % target] = sum(1 for p in mine if served(p))
            row["%s_sent" % target] = len(mine)
            row["%s_latency" % target] = round(max([p["seconds"] for p in mine] or [0]), 3)
        rows.append(row)
    start, end = int(flood_start - t0), int(flood_end - t0)

    def healthy(row):
        return all(row.get("%s_sent" % t, 0) == row.get("%s_ok" % t, 0) for t in ("site", "auth"))

    during = [p for p in probe_rows if flood_start <= p["t"] <= flood_end]
    served_during = sum(1 for p in during if served(p))
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
                        "probes_answered_during_flood": served_during,
                        "probes_answered_pct": round(100.0 * served_during / max(1, len(during)), 1),
                        "probe_codes": probe_codes(during),
                        "probe_codes_after_flood": probe_codes([p for p in probe_rows if p["t"] > flood_end]),
                        "seconds_with_failed_probes_during_flood": len(outage),
                        "healthy_after_flood_s": recovered,
                        "worst_probe_latency_s": max([p["seconds"] for p in during] or [0]),
                        "peak_cpu_pct": max([r.get("cpu_pct") or 0 for r in rows] or [0]),
                        "peak_conntrack": max([r.get("conntrack") or 0 for r in rows] or [0]),
                        "peak_time_wait": max([r.get("time_wait") or 0 for r in rows] or [0]),
                        "flood": dict((k, sum(wrk_counts(o)[k] for o in wrk_outputs)) for k in wrk_counts(""))}}


def nas(*argv):
    """A command on the NAS's console (docker exec), never raising."""
    return sh("docker", "exec", NAS, *argv, check=False)


def health():
    return nas("docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{end}}",
               TRAEFIK).stdout.strip() or "none"


def wedge(address, seconds, healthy_within=60):
    """Traefik stopped (SIGSTOP): still running, answering nothing. Seconds
    until it serves again (None: not within `seconds`), then its health
    check, given `healthy_within` seconds to turn healthy. `address`: the
    NAS on the LAN."""
    started = nas("docker", "inspect", "-f", "{{.State.StartedAt}}", TRAEFIK).stdout
    t0 = time.time()
    nas("docker", "kill", "-s", "STOP", TRAEFIK)
    healed = None
    while time.time() - t0 < seconds:
        if nas("docker", "inspect", "-f", "{{.State.StartedAt}}", TRAEFIK).stdout != started and \
                probes.https_status(PROBER, address) == 200:
            healed = round(time.time() - t0, 1)
            break
        time.sleep(0.5)
    if healed is None:
        nas("docker", "kill", "-s", "CONT", TRAEFIK)
    status = health()
    t1 = time.time()
    while status not in ("healthy", "none") and time.time() - t1 < healthy_within:
        time.sleep(1)
        status = health()
    return {"served_again_s": healed, "health": status}


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
