#!/usr/bin/env python
"""Benchmark the k3d load balancer fix on real k3d (lab/k3d.py).

1. dns: three configurations of the same real k3d load balancer, each a
   cluster of its own made by `k3d cluster create`, and the DNS server alone:
     direct        the cluster's DNS server (dnsmasq in the server node), by
                   its container address: the physical reference
     stock         k3d's own template and values
     seed's fix    seed 000's template edit (proxy_responses 1, 10 s on UDP),
                   worker_rlimit_nofile 16384, 4096 connections, no budget
     homelab.edge  the role (homelab.edge.k3d_serverlb)
   all at the same offered loads (RATES, STEP_S each), each step from a
   freshly restarted load balancer (no sessions left from the step before),
   two paths: the port published on 127.0.0.1 (what a host resolver pays,
   Docker's userland proxy included) and the load balancer's container
   address (nginx alone). Per step: queries planned, sent and answered
   (tests/support/dnsgen.py, a fresh source port per query; a step where
   the generator fell short is marked invalid, not reported), "not enough"
   alerts, HTTPS/API probes through the same load balancer, and CPU per
   answered query per component: the load balancer's cgroup, the DNS
   server's cgroup, docker-proxy's processes, the generator's own. Then the
   DNS server hung (SIGSTOP) at HUNG_RATES. The generator (and the HTTPS/API
   probes) and the system under test (the containers, docker-proxy and the
   Docker engine, which carries their logs) are pinned to different CPUs
   where the machine has two; the engine is unpinned again at the end.
2. role: the role's wall time over 1, 4 and 16 load balancers, its
   no-change rerun, and homelab.edge.diagnose over 1 and 16.
3. capped: a load balancer whose container caps open files at 1,024
   (`k3d cluster create --runtime-ulimit nofile=1024:1024`, a hard limit;
   stock Docker 29 gives soft 1024, hard 524288: no cap), after the role: the state it
   reports, the seed's 9,000 queries at 300 q/s, and the DNS server hung
   under 1,500 q/s, with the same probes and alerts as in 1.

Prints and saves JSON with machine info to benchmarks/results/. Traffic goes
only to 127.0.0.1 and the lab's own containers.

  bench_k3d_serverlb.py [dns] [capped] [role]     (all three without arguments)
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import docker

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "lab"), os.path.join(ROOT, "tests", "support"),
                os.path.join(ROOT, "plugins")]
import k3d  # noqa: E402
import dnsgen  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
from module_utils.k3d_serverlb import config as k3d_config  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
import lb_check  # noqa: E402
import probes  # noqa: E402

CONFIGS = (("stock", "bstock", 41000), ("seed's fix", "bseed", 41100), ("homelab.edge", "bfix", 41200))
RATES = (100, 300, 1000, 3000)
STEP_S = 15
HUNG_RATES = (300, 1000, 1500)
PATHS = ("published", "container")
CGROUP = "/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage"  # cgroup v1, as here; v2 below
CGROUP2 = "/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat"


def pinning():
    """Generator on the last CPU, the system under test on the others, when
    there are at least two; None (nothing pinned) otherwise."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {"generator": {cpus[-1]}, "system": set(cpus[:-1])}


def container_cpu_s(container):
    """CPU seconds a container's cgroup has used (every process in it)."""
    for path, read in ((CGROUP % container.id, lambda t: int(t) / 1e9),
                       (CGROUP2 % container.id, lambda t: int(t.split()[1]) / 1e6)):
        if os.path.exists(path):
            with open(path) as f:
                return read(f.read())
    return None


def processes():
    """(pid, argv) of every process this one can read."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if argv[0]:
            yield int(pid), argv


def proxy_pids(ports):
    """docker-proxy processes relaying the given host ports."""
    return [pid for pid, argv in processes() if os.path.basename(argv[0]) == "docker-proxy" and "-host-port" in argv
            and int(argv[argv.index("-host-port") + 1]) in ports]


def pids_cpu_s(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / float(os.sysconf("SC_CLK_TCK"))


ENGINE = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def engine_pids():
    """The Docker engine's processes: they carry the load balancer's logs
    (a line per refused session under a hung DNS server), so they belong to
    the system under test, not beside the generator."""
    return [pid for pid, argv in processes() if os.path.basename(argv[0]) in ENGINE]


def set_affinity(pids, cpus):
    """Every thread of each process."""
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass


def pin_system(containers, pids, cpus):
    if not cpus:
        return
    spec = ",".join(str(c) for c in sorted(cpus))
    for c in containers:
        c.update(cpuset_cpus=spec)
    set_affinity(pids, cpus)


def step(client, target, rate, seconds, pin, tcp=None, lb_container=None):
    """One offered load: `target` says where the queries go and whose CPU
    counts. Returns the generator's record, alerts, probes and CPU."""
    parts = {"load balancer": target.get("lb"), "DNS server": target["dns_server"]}
    # docker-proxy starts anew with its container: find and pin this step's
    proxies = proxy_pids(target["proxy_ports"])
    pin_system([], proxies, pin["system"] if pin else None)
    before = dict((k, container_cpu_s(c)) for k, c in parts.items() if c is not None)
    proxy0 = pids_cpu_s(proxies)
    prober = probes.Prober(tcp) if tcp else None
    if prober:
        prober.start()
    t0 = time.time()
    r = dnsgen.run(target["host"], target["ports"], rate, seconds, cpus=pin["generator"] if pin else None)
    probed = prober.stop() if prober else None
    after = dict((k, container_cpu_s(c)) for k, c in parts.items() if c is not None)
    used = dict((k, after[k] - before[k]) for k in before if before[k] is not None and after[k] is not None)
    used["docker-proxy"] = pids_cpu_s(proxies) - proxy0
    used["generator"] = r["generator_cpu_s"]
    r["cpu_s"] = dict((k, round(v, 3)) for k, v in used.items())
    r["cpu_us_per_answered"] = dict((k, round(v * 1e6 / r["answered"], 1) if r["answered"] else None)
                                    for k, v in used.items())
    r["tcp_probes"] = probed
    r["alerts"] = probes.count_in_logs(lb_container, probes.NOT_ENOUGH, t0) if lb_container else None
    return r


def fresh(client, cluster):
    """Restart the load balancer: no sessions left from the step before (a
    stock one keeps them 600 s)."""
    c = k3d.restart_lb(client, cluster)
    time.sleep(1)
    return c


def address(container):
    container.reload()
    return next(iter(container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]


def targets(client, cluster, base):
    """Where the queries go on each path, and whose CPU counts there."""
    lbc = client.containers.get(k3d.lb_name(cluster))
    server = client.containers.get(k3d.server_name(cluster))
    ep = k3d.endpoints(base)
    lb_ip = address(lbc)
    return {"published": {"host": "127.0.0.1", "ports": ep["dns"], "lb": lbc, "dns_server": server,
                          "proxy_ports": ep["dns"], "tcp": [ep["https"], ep["api"]]},
            "container": {"host": lb_ip, "ports": [53, 1053], "lb": lbc, "dns_server": server, "proxy_ports": [],
                          "tcp": [(lb_ip, 443), (lb_ip, 6443)]},
            "direct": {"host": address(server), "ports": [53], "dns_server": server, "proxy_ports": [], "tcp": None}}


def say_step(label, path, r):
    tcp = r["tcp_probes"]
    print("  %-12s %-9s %5d q/s: %s%5d/%5d answered, %s alerts, probes %s, CPU us/answered %s" % (
        label, path, r["rate"], "" if r["valid"] else "INVALID (%s) " % r["invalid_because"], r["answered"], r["sent"],
        r["alerts"], "%d/%d" % (tcp["ok"], tcp["ok"] + tcp["failed"]) if tcp else "-",
        json.dumps(r["cpu_us_per_answered"], sort_keys=True)), flush=True)


def configure(client, name, cluster):
    if name == "seed's fix":
        c = client.containers.get(k3d.lb_name(cluster))
        k3d_container.replace_file(c, k3d_container.TEMPLATE_PATH, lb_check.seeds_fix(lb_check.read(c, k3d_container.TEMPLATE_PATH)))
        k3d_container.render(c, 30)
    elif name == "homelab.edge":
        apply_role([cluster], keeper=False)
    time.sleep(2)


def apply_role(clusters, keeper=False):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("- hosts: localhost\n  connection: local\n  gather_facts: true\n  roles:\n"
                "    - role: homelab.edge.k3d_serverlb\n      vars:\n        k3d_serverlb_keeper: %s\n"
                "        k3d_serverlb_clusters: %s\n        k3d_serverlb_udp_ports: %s\n"
                % ("true" if keeper else "false", json.dumps(clusters), json.dumps(k3d.UDP_PROFILES)))
    t0 = time.time()
    out = subprocess.run(["ansible-playbook", "-e", "ansible_python_interpreter=%s" % sys.executable, f.name],
                         capture_output=True, text=True, check=False)
    took = round(time.time() - t0, 2)
    os.unlink(f.name)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:])
    return took


def diagnose_time(clusters):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("all:\n  children:\n    k3d_hosts:\n      hosts:\n        localhost:\n          ansible_connection: local\n"
                "          ansible_become: false\n          ansible_python_interpreter: %s\n"
                "          k3d_serverlb_clusters: %s\n          k3d_serverlb_udp_ports: %s\n"
                % (sys.executable, json.dumps(clusters), json.dumps(k3d.UDP_PROFILES)))
    t0 = time.time()
    out = subprocess.run(["ansible-playbook", "-i", f.name, os.path.join(ROOT, "playbooks", "diagnose.yml"),
                          "-e", "diagnose_output=/dev/null"], capture_output=True, text=True, check=False)
    took = round(time.time() - t0, 2)
    os.unlink(f.name)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:])
    return took


def dns_part(client, result):
    pin = pinning()
    for name, cluster, base in CONFIGS:
        k3d.create(cluster, base)
    steps, hung_steps = [], []
    try:
        for name, cluster, base in CONFIGS:
            k3d.wait_serving(client, cluster)
            configure(client, name, cluster)
        where = {}
        for name, cluster, base in CONFIGS:
            where[name] = targets(client, cluster, base)
            t = where[name]
            pin_system([t["published"]["lb"], t["published"]["dns_server"]], [], pin["system"] if pin else None)
        if pin:  # this process probes HTTPS and the API: on the generator's side too
            os.sched_setaffinity(0, pin["generator"])
            set_affinity(engine_pids(), pin["system"])
        direct = where["stock"]["direct"]  # the stock cluster's DNS server, no load balancer
        for rate in RATES:
            r = step(client, direct, rate, STEP_S, pin)
            r.update(config="direct", path="container")
            steps.append(r)
            say_step("direct", "container", r)
            for name, cluster, base in CONFIGS:
                for path in PATHS:
                    lbc = fresh(client, cluster)
                    t = dict(where[name][path], lb=lbc)
                    r = step(client, t, rate, STEP_S, pin, tcp=t["tcp"], lb_container=lbc)
                    r.update(config=name, path=path)
                    steps.append(r)
                    say_step(name, path, r)
        for rate in HUNG_RATES:
            for name, cluster, base in CONFIGS:
                lbc = fresh(client, cluster)
                t = dict(where[name]["published"], lb=lbc)
                with k3d.dns_server_hung(client, cluster):
                    r = step(client, t, rate, STEP_S, pin, tcp=t["tcp"], lb_container=lbc)
                r.update(config=name, path="published", dns_server="hung (SIGSTOP)")
                hung_steps.append(r)
                say_step(name + " hung", "published", r)
        live = live_settings(client, CONFIGS)
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        set_affinity(engine_pids(), set(range(os.cpu_count())))
        k3d.delete(*[c for n, c, b in CONFIGS])
    result["dns"] = {"rates": list(RATES), "step_s": STEP_S, "hung_rates": list(HUNG_RATES),
                     "pinning": dict((k, sorted(v)) for k, v in pin.items()) if pin else "not pinned (one CPU)",
                     "generator": {"module": "tests/support/dnsgen.py", "min_sent_share": dnsgen.MIN_SENT_SHARE,
                                   "max_overrun": dnsgen.MAX_OVERRUN},
                     "live_settings": live, "steps": steps, "hung_steps": hung_steps}
    result["dns_tables"] = dns_tables(steps, hung_steps)


def _cell(r, what):
    if r is None:
        return "-"
    if not r["valid"]:
        return "invalid"
    return what(r)


def dns_tables(steps, hung_steps):
    """One table per question, every configuration at the same offered loads."""
    def find(rows, config, path, rate):
        return next((r for r in rows if r["config"] == config and r["path"] == path and r["rate"] == rate), None)

    names = ["direct"] + [n for n, c, b in CONFIGS]
    out = []

    def table(title, rows_, columns, cell, source=steps):
        out.append(title)
        out.append("  %-26s | %s" % ("", " | ".join("%15s" % ("%d q/s" % c) for c in columns)))
        for label, config, path in rows_:
            cells = [_cell(find(source, config, path, c), cell) for c in columns]
            out.append("  %-26s | %s" % (label, " | ".join("%15s" % c for c in cells)))
    both = [("direct (container)", "direct", "container")] + [
        ("%s (%s)" % (n, p), n, p) for n in names[1:] for p in PATHS]
    table("DNS answered of sent, %d s at each rate (invalid: the generator fell short, not reported)" % STEP_S,
          both, RATES, lambda r: "%d/%d" % (r["answered"], r["sent"]))
    table("'worker_connections are not enough' lines", both[1:], RATES, lambda r: str(r["alerts"]))
    table("HTTPS+API probes through the same load balancer meanwhile (ok/sent)", both[1:], RATES,
          lambda r: "%d/%d" % (r["tcp_probes"]["ok"], r["tcp_probes"]["ok"] + r["tcp_probes"]["failed"]))
    table("DNS server hung: alerts; probes ok/sent (published port)", [(n, n, "published") for n in names[1:]],
          HUNG_RATES, lambda r: "%d; %d/%d" % (r["alerts"], r["tcp_probes"]["ok"],
                                               r["tcp_probes"]["ok"] + r["tcp_probes"]["failed"]), source=hung_steps)
    for comp in ("load balancer", "DNS server", "docker-proxy", "generator"):
        table("CPU us per answered query: %s" % comp, both if comp != "load balancer" else both[1:], RATES,
              lambda r, comp=comp: "%s" % r["cpu_us_per_answered"].get(comp) if r["answered"] else "no answers")
    return out


def capped_part(client, result, cap=1024):
    cluster, base = "bcap", 41300
    k3d.create(cluster, base, extra=["--runtime-ulimit", "nofile=%d:%d" % (cap, cap)])
    try:
        k3d.wait_serving(client, cluster)
        apply_role([cluster], keeper=False)
        c = client.containers.get(k3d.lb_name(cluster))
        state = k3d_fix.handle(c, c.name, True, dict(k3d_fix.DEFAULTS, udp_ports=k3d.UDP_PROFILES), check_mode=True)
        t = targets(client, cluster, base)["published"]
        seed = step(client, t, 300, 30, pinning(), tcp=t["tcp"], lb_container=c)
        c = fresh(client, cluster)
        with k3d.dns_server_hung(client, cluster):
            stuck = step(client, dict(t, lb=c), 1500, 30, pinning(), tcp=t["tcp"], lb_container=c)
        exceed = [ln for ln in c.logs().decode("utf-8", "replace").splitlines() if "exceed open file" in ln]
    finally:
        k3d.delete(cluster)
    result["capped"] = {"runtime_ulimit_nofile": cap, "state": state["state_text"],
                        "worker_connections": state["worker_connections"],
                        "udp_session_budget": state["udp_session_budget"], "exceed_open_file_lines": len(exceed),
                        "seed_9000_at_300": seed, "dns_hung": stuck}
    print("capped at %d open files: %s, worker_connections %s, UDP budget %s" % (
        cap, state["state_text"], state["worker_connections"], state["udp_session_budget"]))
    say_step("capped", "published", seed)
    say_step("capped hung", "published", stuck)


def role_part(client, result):
    timing, clusters = {}, []
    try:
        for n in (1, 4, 16):
            while len(clusters) < n:
                name = "bench%d" % (len(clusters) + 1)
                k3d.create(name)  # nothing published: the role is what is timed
                clusters.append(name)
            for cluster in clusters:
                k3d.wait_serving(client, cluster)
            timing[n] = {"diagnose_before": diagnose_time(clusters), "apply": apply_role(clusters),
                         "no_change": apply_role(clusters), "diagnose_after": diagnose_time(clusters)}
            print("  over %2d load balancers: apply %.1f s, no-change rerun %.1f s, diagnose %.1f s" % (
                n, timing[n]["apply"], timing[n]["no_change"], timing[n]["diagnose_after"]), flush=True)
            if n < 16:  # the next size starts from stock load balancers again
                k3d.delete(*clusters)
                clusters = []
    finally:
        k3d.delete(*clusters)
    result["role_seconds"] = timing
    result["no_change_16_over_no_change_1"] = round(timing[16]["no_change"] / timing[1]["no_change"], 2)
    result["diagnose_16_over_diagnose_1"] = round(timing[16]["diagnose_after"] / timing[1]["diagnose_after"], 2)


def live_settings(client, configs):
    """What each configuration's nginx runs with, read from its live nginx.conf: worker_connections, the UDP
    timeout and the UDP session budget (the figures a computed limit rests on)."""
    live = {}
    for name, cluster, dummy in configs:
        c = client.containers.get(k3d.lb_name(cluster))
        rep = k3d_config.report(c.name, cluster, k3d_config.parse_live(lb_check.read(c, k3d_container.NGINX_CONF)),
                                None)
        live[name] = {"worker_connections": rep["worker_connections"], "udp_timeout_s": rep["udp_timeout"],
                      "udp_session_budget": rep["udp_session_budget"]}
    return live


def cpu_model():
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())


def main():
    parts = sys.argv[1:] or ["dns", "capped", "role"]
    client = docker.from_env()
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                          "docker": client.version()["Version"], "k3d": k3d.k3d("version").stdout.split("\n")[0],
                          "kernel": platform.release(), "cpu_model": cpu_model(),
                          "date": time.strftime("%FT%T%z")}}
    if "dns" in parts:
        dns_part(client, result)
    if "role" in parts:
        role_part(client, result)
    if "capped" in parts:
        capped_part(client, result)
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", "k3d_serverlb-%s.json" % time.strftime("%Y%m%dT%H%M%S"))
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for line in result.get("dns_tables", []):
        print(line)
    print(json.dumps(dict((k, v) for k, v in result.items() if k not in ("machine", "dns", "dns_tables")), indent=1))
    print("saved %s" % path)


if __name__ == "__main__":
    main()
