#!/usr/bin/env python
"""Where each k3d load balancer configuration stops holding, on real k3d.

The same clusters as bench_k3d_serverlb.py (stock, the seed's fix,
homelab.edge) and the DNS server asked directly, loaded by the compiled
generator (tests/support/loadgen_go/cmd/dnsgen via dnsgen.run_compiled: a fresh source
port per query, an absolute schedule, pinned to the last CPU under
SCHED_FIFO; the clusters and the engine on the others). Three parts:

1. ladder: for each configuration, rates rising x2 from START until a step
   fails, then bisected (tests/support/ladder.py holds the rules). A step
   holds when the generator is valid (dnsgen.compiled_validity) and at least
   99.9 % of the queries are answered, their p99 latency is under 50 ms, nginx
   logs no "not enough" line and at least 99 % of the HTTPS and API probes
   (open loop, 4 a second each) through the same load balancer answer. Each
   step starts from a restarted load balancer with the lab's conntrack
   entries to it deleted. The configurations run in a random order per
   repetition (REPETITIONS, seed saved). CPU per component at each step: the
   load balancer's cgroup, dnsmasq's own processes (the DNS server; the
   stand-in's TLS endpoints, nginx in the same node, apart), the generator's.
   A failed step says what ran out: connections ("not enough" lines) or a
   component's CPU.
2. slow: the DNS server slow but alive (every answer DELAY s late: a
   delaying responder in the node's network namespace, as no kernel here has
   netem) at rising rates, the seed's fix and homelab.edge: DNS answered and
   HTTPS/API probes ok at each rate.
3. lowrate: stock k3d at 1, 2, 4 and 8 q/s, four clusters at once: the time to
   the first "worker_connections are not enough" line, against the computed
   1024 / (2 x rate) s.
4. quota (by name only; about 80 minutes): limits placed on two cores by
   design. Each load balancer held to 5, 7.5 and 10 % of CPU 0 (a CFS quota of
   a 20-ms period), the DNS server beside it on CPU 0, receive processing
   steered to CPU 0 (RPS on both ends of each veth), the generator and the
   probes on CPU 1. At each quota three repetitions of the seed's fix and
   homelab.edge alternating (ABAB) and stock after them, 20-s steps. Each
   limit with its spread, the periods throttled at the failing step (the load
   balancer ran out of its quota), the generator's and the DNS server's
   headroom there, the ratio homelab.edge / the seed's fix per repetition,
   and each load balancer's service demand (its cgroup's CPU-seconds per
   answered query, regressed over the steps that held) with the capacity
   computed from it against the ladder's.
5. separation (by name only; about 12 minutes): the slow part with the DNS
   server 4 s late (SEPARATION): the seed's fix runs out of connections at
   4,096 / (2 x 4 s) = 512 q/s per nginx worker (computed), homelab.edge's
   UDP budget drops DNS above 1,024 / 4 s = 256 q/s (computed) and keeps
   HTTPS and the API; three repetitions, alternating.
6. cost (by name only; about 35 minutes): where homelab.edge's CPU goes -
   homelab.edge against itself without its UDP budget (the shared-memory
   zone both workers lock for each session) and with the seed's 10-s UDP
   timeout, ladders at 5 % of CPU 0 as in the quota part.

Prints and saves JSON with machine info to benchmarks/results/. Traffic goes
only to the lab's own containers.

7. cpu (by name only; about 75 minutes): what one DNS query costs each load
   balancer (stock, the seed's fix, homelab.edge, homelab.edge without its
   budget), each alone on CPU 0 and unthrottled, the generator and the DNS
   servers on CPU 1: its cgroup's CPU per answered query at three rates well
   under a core, CPU_REPETITIONS repetitions in ABAB order, with 95 %
   intervals and the differences paired by repetition; then perf profiles of
   CPU 0 (seed's fix, homelab.edge, no budget) as flame graphs beside the
   result. BENCH_CPU_CONFIGS / _RATES / _STEP_S / _REPETITIONS / _TICK_S change
   the plan (short trial runs).

  bench_k3d_ladder.py [ladder] [slow] [lowrate] [quota] [separation] [cost] [cpu]     (the first three without arguments)
  bench_k3d_ladder.py report FILE     the quota summary computed again from FILE's saved runs
"""
import calendar
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time

import docker

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path[:0] = [HERE, os.path.join(ROOT, "lab"), os.path.join(ROOT, "tests", "support"),
                os.path.join(ROOT, "plugins")]
import bench_k3d_serverlb as base  # noqa: E402  (the clusters, their configuration, CPU and pinning)
import lb_check  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
import dnsgen  # noqa: E402
import k3d  # noqa: E402
import ladder  # noqa: E402
import probes  # noqa: E402
import flame  # noqa: E402  (perf's samples folded and drawn)

CONFIGS = (("direct", None, None),) + base.CONFIGS
START, STEP_S, REPETITIONS, SEED = 250, 5, 3, 20261204
TIMEOUT_S = 1.0  # the generator's wait for an answer
RETRIES = 2  # a step the generator was not valid in is run again, at most this many times
FIFO = 10
SLOW_DELAY_S, SLOW_RATES, SLOW_STEP_S, SLOW_PORT = 0.5, (100, 200, 400, 800, 1600, 3200, 6400), 5, 5300
# each slow query holds one of the generator's sockets for 0.5 s, an unanswered one for the whole wait: at 6400 q/s
# with a 2-s wait homelab.edge's dropped answers (its budget) held more than 8,192 and the step was invalid
# (pool exhausted); a wait of 0.8 s keeps them under 5,000. 8,192 stays under this machine's 20,000 open files
SLOW_POOL, SLOW_TIMEOUT_S = 8192, SLOW_DELAY_S + 0.3
LOW_RATES, LOW_PORTS = (1, 2, 4, 8), (41400, 41500, 41600, 41700)
# quota: each load balancer given a fixed share of CPU 0 (a CFS quota of a short period), so its limit falls where the
# generator (CPU 1) and the DNS server (CPU 0, beside it) have room to spare. Docker refuses a quota under 1 ms (5 % of
# the 20-ms period); at 20 % the generator's headroom fell under 5x (about 4x at 3,200 q/s in a trial): 5 to 10 %
QUOTAS_PCT, QUOTA_PERIOD_US, QUOTA_STEP_S, QUOTA_REPETITIONS = (5, 7.5, 10), 20000, 20, 3
QUOTA_START_PER_PCT, QUOTA_BISECTIONS = 80, 4  # the fixes' first rate: 80 q/s per % of a core; 4 halvings after
STOCK_START, STOCK_BISECTIONS = 20, 1  # stock runs out of connections (512 sessions of 600 s each), not CPU
HEADROOM = 5  # the generator and the DNS server: at least 5x the CPU they used at each fix's first failing step
DEMAND_PER_PCT = (20, 40)  # the service demand's own steps, before each quota's ladders: q/s per % of a core
CGROUP_CPU = "/sys/fs/cgroup/cpu/docker/%s/cpu.stat"  # cgroup v1 (this machine kind); v2 below
CGROUP2_CPU = "/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat"
SLOWDNS = os.path.join(ROOT, "tests", "support", "slowdns.py")


def conntrack_count():
    with open("/proc/sys/net/netfilter/nf_conntrack_count") as f:
        return int(f.read())


def conntrack_tool():
    """Debian's conntrack (to delete the lab's own entries between steps), installed when missing."""
    if not shutil.which("conntrack"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "conntrack"], check=True, capture_output=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return shutil.which("conntrack")


def forget(addresses, baseline, bound_s=20):
    """Delete the conntrack entries to the lab's own containers, then wait
    (bounded) until the count is back near its baseline. Returns the count."""
    for a in addresses:
        subprocess.run([conntrack_tool(), "-D", "-d", a], capture_output=True, check=False)
    t0 = time.time()
    while conntrack_count() > baseline + 100 and time.time() - t0 < bound_s:
        time.sleep(0.5)
    return conntrack_count()


def lab_addresses(client):
    """The addresses of the benchmark's clusters' load balancers and server nodes (every cluster it made: their
    names start with "b")."""
    out = []
    for c in client.containers.list(filters={"name": "k3d-b"}):
        with contextlib.suppress(docker.errors.NotFound, StopIteration):
            out.append(base.address(c))
    return [a for a in out if a]


def dnsmasq_pids(server):
    """dnsmasq's processes in the server node, as this host's PIDs."""
    top = server.top(ps_args="-o pid,comm")
    i, j = top["Titles"].index("PID"), top["Titles"].index("COMMAND")
    return [int(p[i]) for p in top["Processes"] if p[j] == "dnsmasq"]


def node_pid(container):
    container.reload()
    return container.attrs["State"]["Pid"]


@contextlib.contextmanager
def slow_upstream(server, delay, cpus=None):
    """The node's DNS ports (53, 1053) redirected to a responder that answers
    `delay` s late, in the node's own network namespace, on `cpus` (the system
    under test's, not the generator's this process probes from); both removed
    after."""
    pid = str(node_pid(server))
    p = subprocess.Popen(["nsenter", "-t", pid, "-n", sys.executable, SLOWDNS, "--port", str(SLOW_PORT),
                          "--delay", str(delay), "--seconds", "900"], stdout=subprocess.PIPE, text=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    rules = ("table ip homelab_edge_slow {\n chain pre {\n  type nat hook prerouting priority dstnat;\n"
             "  udp dport { 53, 1053 } redirect to :%d\n }\n}\n" % SLOW_PORT)
    try:
        if not p.stdout.readline().startswith("ready "):
            raise RuntimeError("the slow responder did not start")
        subprocess.run(["nsenter", "-t", pid, "-n", "nft", "-f", "-"], input=rules, text=True, check=True,
                       capture_output=True)
        yield p.pid
    finally:
        subprocess.run(["nsenter", "-t", pid, "-n", "nft", "delete", "table", "ip", "homelab_edge_slow"],
                       capture_output=True, check=False)
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def throttling(container):
    """The container cgroup's CFS counters: periods, periods throttled, seconds throttled (cgroup v1 or v2)."""
    for path, unit in ((CGROUP_CPU % container.id, 1e9), (CGROUP2_CPU % container.id, 1e6)):
        if os.path.exists(path):
            with open(path) as f:
                kv = dict(line.split() for line in f if line.strip())
            wait = kv.get("throttled_time", kv.get("throttled_usec", 0))
            return {"nr_periods": int(kv.get("nr_periods", 0)), "nr_throttled": int(kv.get("nr_throttled", 0)),
                    "throttled_s": int(wait) / unit}
    return None


STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")


def cpu_times(cpus):
    """Seconds each CPU has spent in each state (/proc/stat: user, nice, system, idle, iowait, irq, softirq). This
    kernel samples them by tick (no IRQ time accounting): softirq run by ksoftirqd counts as system time, softirq
    run in a task's context may count to that task (and its cgroup) too - they overlap the cgroups' figures."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name = line.split(" ", 1)[0]
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                fields = line.split()[1:1 + len(STAT_COLUMNS)]
                out[int(name[3:])] = dict((k, int(v) / float(os.sysconf("SC_CLK_TCK")))
                                          for k, v in zip(STAT_COLUMNS, fields))
    return out


def ksoftirqd_pids(cpus):
    """The kernel threads that run each CPU's softirq when it falls behind (their time is system time here)."""
    names = set("ksoftirqd/%d" % c for c in cpus)
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and _comm(d) in names]


def _comm(pid):
    try:
        with open("/proc/%s/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def veth_peer(pid):
    """The host's device at the other end of a container's eth0 (its @ifN), by the process `pid` in it."""
    out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show", "eth0"], capture_output=True,
                         text=True, check=True).stdout
    index = re.search(r"eth0@if(\d+)", out).group(1)
    for dev in os.listdir("/sys/class/net"):
        with open("/sys/class/net/%s/ifindex" % dev) as f:
            if f.read().strip() == index:
                return dev
    raise RuntimeError("no device with ifindex %s on this host (the peer of %s's eth0)" % (index, pid))


STEERED = {}  # host device -> its rps_cpus before steer_receive wrote it (restored by unsteer)


def steer_receive(containers, cpus):
    """Receive processing of each container's traffic steered to `cpus` (RPS on both ends of its veth pair): the
    packets the generator sends from CPU 1 are processed on the system's CPU, not charged to the generator's.
    Returns {end: mask} of what it wrote; the host ends are restored by unsteer()."""
    mask = "%x" % sum(1 << c for c in cpus)
    wrote = {}
    for c in containers:
        pid = node_pid(c)
        dev = veth_peer(pid)
        path = "/sys/class/net/%s/queues/rx-0/rps_cpus" % dev
        with open(path) as f:
            STEERED.setdefault(dev, f.read().strip())
        with open(path, "w") as f:
            f.write(mask)
        # the container's end: its own sysfs, mounted in a private mount namespace inside its network namespace
        subprocess.run(["nsenter", "-t", str(pid), "-n", "unshare", "-m", "sh", "-c",
                        "mount -t sysfs sysfs /sys && echo %s > /sys/class/net/eth0/queues/rx-0/rps_cpus" % mask],
                       capture_output=True, text=True, check=True)
        wrote.update({dev: mask, "%s:eth0" % c.name: mask})
    return wrote


def unsteer():
    """Every host end steer_receive wrote back to what it was (a device gone with its container is skipped)."""
    for dev, old in sorted(STEERED.items()):
        with contextlib.suppress(OSError):
            with open("/sys/class/net/%s/queues/rx-0/rps_cpus" % dev, "w") as f:
                f.write(old)
    STEERED.clear()


def clusters_up(client, pin):
    """The three clusters, each configured, their containers on the system's CPUs."""
    for name, cluster, port in base.CONFIGS:
        k3d.create(cluster, port)
    for name, cluster, port in base.CONFIGS:
        k3d.wait_serving(client, cluster)
        base.configure(client, name, cluster)
        c = [client.containers.get(k3d.lb_name(cluster)), client.containers.get(k3d.server_name(cluster))]
        base.pin_system(c, [], pin["system"] if pin else None)
    if pin:
        os.sched_setaffinity(0, pin["generator"])  # this process probes: on the generator's side
        base.set_affinity(base.engine_pids(), pin["system"])


def clusters_down():
    os.sched_setaffinity(0, set(range(os.cpu_count())))
    base.set_affinity(base.engine_pids(), set(range(os.cpu_count())))
    k3d.delete(*[c for n, c, p in base.CONFIGS])


def load_step(client, name, cluster, rate, seconds, pin, baseline, timeout=TIMEOUT_S, slow=None, pool=None,
              steer=None):
    """One step: a restarted load balancer (or the DNS server directly for
    "direct"), the lab's conntrack entries deleted, the generator at `rate`
    for `seconds`, open-loop probes through the same load balancer. Returns
    the generator's record with alerts, probes, CPU and the ladder's verdict."""
    server = client.containers.get(k3d.server_name(cluster or base.CONFIGS[0][1]))
    marks = [("start", time.time())]
    lbc = None if name == "direct" else base.fresh(client, cluster)
    marks.append(("restart", time.time()))
    steered = steer_receive([lbc], steer) if steer and lbc is not None else None  # a restarted one has a new veth
    server_ip = base.address(server)
    target = server_ip if lbc is None else base.address(lbc)
    tcp = None if lbc is None else [(target, 443), (target, 6443)]
    # every lab container's address: a step of another configuration just before left its entries too
    conntrack0 = forget(sorted(set([target, server_ip] + lab_addresses(client))), baseline)
    marks.append(("forget", time.time()))
    dnsmasq, extra = dnsmasq_pids(server), [slow] if slow else []  # the slow responder runs outside the node's cgroup
    parts = {"load balancer": lbc}
    before = dict((k, base.container_cpu_s(c)) for k, c in parts.items() if c is not None)
    node0, dnsmasq0, extra0 = base.container_cpu_s(server), base.pids_cpu_s(dnsmasq), base.pids_cpu_s(extra)
    throttled0 = throttling(lbc) if lbc is not None else None
    every = list(range(os.cpu_count()))
    times0, ksoft = cpu_times(every), ksoftirqd_pids(every)
    ksoft0 = base.pids_cpu_s(ksoft)
    prober = probes.OpenLoopProber(tcp, interval=0.25) if tcp else None
    if prober:
        prober.start()
    t0 = time.time()
    r = dnsgen.run_compiled(target, [53] if lbc is None else [53, 1053], rate, seconds, timeout=timeout,
                            cpus=pin["generator"] if pin else None, fifo=FIFO if pin else None, pool=pool)
    marks.append(("load", time.time()))
    r["probes"] = prober.stop() if prober else None
    used = dict((k, base.container_cpu_s(c) - before[k]) for k, c in parts.items() if c is not None)
    in_dnsmasq = base.pids_cpu_s(dnsmasq) - dnsmasq0
    used["DNS server"] = in_dnsmasq + base.pids_cpu_s(extra) - extra0
    used["TLS endpoints (k3s stand-in)"] = max(0.0, base.container_cpu_s(server) - node0 - in_dnsmasq)
    used["generator"] = r["generator_cpu_s"]
    r["cpu_s"] = dict((k, round(v, 3)) for k, v in used.items())
    times1 = cpu_times(every)
    r["cpu_times_s"] = dict((str(c), dict((k, round(times1[c][k] - times0[c][k], 3)) for k in STAT_COLUMNS))
                            for c in every if c in times0 and c in times1)
    r["softirq_s"] = dict((c, t["softirq"]) for c, t in r["cpu_times_s"].items())
    r["ksoftirqd_cpu_s"] = round(base.pids_cpu_s(ksoft) - ksoft0, 3)
    r["steered"] = steered
    throttled1 = throttling(lbc) if lbc is not None else None
    r["throttling"] = dict((k, round(throttled1[k] - throttled0[k], 3)) for k in throttled1) if throttled1 else None
    r["alerts"] = probes.count_in_logs(lbc, probes.NOT_ENOUGH, t0) if lbc is not None else 0
    r["conntrack_before"], r["conntrack_after"] = conntrack0, conntrack_count()
    marks.append(("after", time.time()))
    r["phases_s"] = dict((b[0], round(b[1] - a[1], 2)) for a, b in zip(marks, marks[1:]))
    r["config"] = name
    r["holds"], r["why"] = ladder.holds(r)
    return r


def say(r, extra=""):
    p = r["probes"]
    print("  %-13s %6d q/s: %s answered %d/%d p99 %s ms, %d alerts, probes %s, CPU s %s%s" % (
        r["config"], r["rate"], {True: "holds", False: "FAILS", None: "INVALID"}[r["holds"]], r["answered"],
        r["sent"], None if r["latency_p99_s"] is None else round(r["latency_p99_s"] * 1000, 1), r["alerts"],
        "%d/%d" % (p["ok"], p["planned"]) if p else "-", json.dumps(r["cpu_s"], sort_keys=True),
        "" if r["holds"] else " (%s)" % r["why"]) + extra, flush=True)


def cpus_of(pin):
    """The CPUs each component may use, as sets: components on the same CPUs share them, and ladder.bound_by
    adds them up (two components at half a core each ran that core out)."""
    system = set(pin["system"]) if pin else set(range(os.cpu_count()))
    return {"load balancer": system, "DNS server": system, "TLS endpoints (k3s stand-in)": system,
            "generator": set(pin["generator"]) if pin else system}


def generator_ceiling():
    """The compiled generator's proven top rate on this machine (benchmarks/bench_dnsgen.py's committed result), or
    None without one: the ladder never offers more, so no step above it is a measurement of the generator."""
    try:
        with open(os.path.join(ROOT, "benchmarks", "results", "dnsgen-ceiling.json")) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return None
    built = saved.get("machine", {}).get("dnsgen")
    return saved.get("ceiling_qps") if built in (None, dnsgen.go_sources_hash()) else None


def ladder_part(client, result, save=None):
    pin = base.pinning()
    ceiling = generator_ceiling()
    result["generator_ceiling_qps"] = ceiling
    orders = ladder.orders([n for n, c, p in CONFIGS], REPETITIONS, SEED)
    runs = []
    clusters_up(client, pin)
    baseline = conntrack_count()  # with the clusters up: their own traffic is no leftover of a step
    try:
        for rep, order in enumerate(orders, 1):
            print("repetition %d: %s" % (rep, ", ".join(order)), flush=True)
            for name in order:
                cluster = dict((n, c) for n, c, p in CONFIGS)[name]
                lim, steps = one_ladder(client, name, cluster, START, pin, baseline, STEP_S, ceiling=ceiling)
                at = next((s for s in steps if s["rate"] == lim["fails_at"] and s["holds"] is False), None)
                lim["bound_by"] = ladder.bound_by(at, cpus_of(pin)) if at else None
                lim["cpu_s_at_failure"] = at["cpu_s"] if at else None
                lim["invalid_attempts"] = sum(1 for s in steps if s["holds"] is None)
                print("  %s: holds at %s q/s, fails at %s q/s (%s)%s" % (
                    name, lim["holds_at"], lim["fails_at"], lim["bound_by"],
                    "; the generator invalid at %s q/s" % lim["invalid_at"] if lim["invalid_at"] else ""), flush=True)
                runs.append({"repetition": rep, "config": name, "limit": lim, "steps": steps})
    finally:
        clusters_down()
    result["ladder"] = {"start": START, "factor": 2, "bisections": ladder.BISECTIONS, "step_s": STEP_S,
                        "repetitions": REPETITIONS, "seed": SEED, "orders": orders,
                        "holds": {"min_answered": ladder.MIN_ANSWERED, "max_latency_p99_s": ladder.MAX_LATENCY_P99_S,
                                  "min_probes_ok": ladder.MIN_PROBES_OK},
                        "pinning": dict((k, sorted(v)) for k, v in pin.items()) if pin else "not pinned (one CPU)",
                        "runs": runs}
    result["ladder_table"] = ladder_table(runs)


def ladder_table(runs):
    out = ["limit of each configuration, per repetition: the highest rate held / the lowest that failed (q/s), what ran "
           "out there, the steps discarded because the generator was not valid, and each component's CPU seconds "
           "over the failing %d-s step" % STEP_S]
    for name in [n for n, c, p in CONFIGS]:
        held = []
        for run in [r for r in runs if r["config"] == name]:
            lim = run["limit"]
            if lim["invalid_at"]:
                what = "ended: the generator not valid at %s" % lim["invalid_at"]
            else:
                what = lim["bound_by"] or "-"
            out.append("  %-13s rep %d: %6s / %-6s %-44s %d discarded  %s" % (
                name, run["repetition"], lim["holds_at"], lim["fails_at"] or "-", what, lim["invalid_attempts"],
                json.dumps(lim["cpu_s_at_failure"], sort_keys=True) if lim["cpu_s_at_failure"] else ""))
            if lim["holds_at"] is not None and not lim["invalid_at"]:
                held.append(lim["holds_at"])
        out.append("  %-13s median of the repetitions that found a limit: %s" % (
            name, ladder.spread(held)["median"] if held else "none"))
    return out


def one_ladder(client, name, cluster, start, pin, baseline, step_s, bisections=ladder.BISECTIONS, steer=None,
               ceiling=None):
    """A configuration's ladder: rising x2 from `start`, then `bisections` halvings, `step_s` per step; a step
    where the generator itself was not valid says nothing and is tried again (at most RETRIES times, each from a
    restarted load balancer), every attempt kept. Returns (limit with "invalid_at": the rate where every attempt
    was invalid, steps)."""
    tried, steps = [], []
    rate = ladder.next_rate(tried, start, bisections=bisections, ceiling=ceiling)
    while rate is not None and len(steps) < 20:
        for attempt in range(1 + RETRIES):
            r = load_step(client, name, cluster, rate, step_s, pin, baseline, steer=steer)
            r["attempt"] = attempt + 1
            t = r.get("throttling")
            say(r, " throttled %s of %s periods" % (t.get("nr_throttled"), t.get("nr_periods")) if t else "")
            steps.append(r)
            if r["holds"] is not None:
                break
        tried.append((rate, r["holds"]))
        rate = ladder.next_rate(tried, start, bisections=bisections, ceiling=ceiling)
    lim = ladder.limit(tried)
    lim["invalid_at"] = next((rt for rt, h in tried if h is None), None)
    return lim, steps


def quota_limit_facts(lim, steps, pct, pin):
    """What a ladder's limit rests on: what ran out at the lowest failing step, the share of periods throttled
    there, and the generator's and the DNS server's headroom there (computed: available / used)."""
    at = next((s for s in steps if s["rate"] == lim["fails_at"] and s["holds"] is False), None)
    lim["invalid_attempts"] = sum(1 for s in steps if s["holds"] is None)
    if at is None:
        lim.update(bound_by=None, throttled_share=None, headroom=None)
        return lim
    cpus = dict(cpus_of(pin), **{"load balancer": pct / 100.0})
    t = at.get("throttling") or {}
    lim["bound_by"] = ladder.bound_by(at, cpus)
    lim["throttled_share"] = round(t["nr_throttled"] / float(t["nr_periods"]), 3) if t.get("nr_periods") else None
    lim["headroom"] = headroom_at(at, pin)
    return lim


def headroom_at(step, pin):
    """How many times its use at `step` the generator and the DNS server could carry (computed from the step's own
    figures): the DNS server what it used plus its CPU's idle time; the generator what it used plus its CPU's idle
    time, at most the share its validity allows (dnsgen.COMPILED_MAX_CPU_SHARE of the step)."""
    times, wall = step.get("cpu_times_s") or {}, step.get("wall_s") or 0
    sys_cpu, gen_cpu = [str(c) for c in sorted(pin["system"])], [str(c) for c in sorted(pin["generator"])]
    idle = dict((k, sum((times.get(c) or {}).get("idle", 0) for c in cpus)) for k, cpus in
                (("DNS server", sys_cpu), ("generator", gen_cpu)))
    used = dict((k, step["cpu_s"].get(k)) for k in ("DNS server", "generator"))
    out = {}
    for k in used:
        if not used[k] or not wall:
            out[k] = None
            continue
        available = used[k] + idle[k]
        if k == "generator":
            available = min(available, dnsgen.COMPILED_MAX_CPU_SHARE * wall * len(gen_cpu))
        out[k] = round(ladder.headroom(available / wall, used[k], wall), 1)
    return out


def quota_part(client, result, save):
    """Ladders with each load balancer held to QUOTAS_PCT of CPU 0 (CFS quota, QUOTA_PERIOD_US period), the DNS
    server beside it on CPU 0, receive processing steered there, the generator and the probes on CPU 1."""
    pin = base.pinning()
    if not pin:
        raise SystemExit("the quota ladders need two CPUs: one for the system under test, one for the generator")
    runs, demand, order = [], [], ladder.alternating([n for n, c, p in base.CONFIGS[1:]], [base.CONFIGS[0][0]],
                                                     QUOTA_REPETITIONS)
    clusters = dict((n, c) for n, c, p in base.CONFIGS)
    clusters_up(client, pin)
    try:
        result["quota_setup"] = {
            "pinning": dict((k, sorted(v)) for k, v in pin.items()), "live_settings": base.live_settings(
                client, base.CONFIGS), "steered_nodes": steer_receive(
                    [client.containers.get(k3d.server_name(c)) for n, c, p in base.CONFIGS], pin["system"])}
        baseline = conntrack_count()  # with the clusters up: their own traffic is no leftover of a step
        for pct in QUOTAS_PCT:
            for name, cluster, port in base.CONFIGS:
                client.containers.get(k3d.lb_name(cluster)).update(
                    cpu_period=QUOTA_PERIOD_US, cpu_quota=int(QUOTA_PERIOD_US * pct / 100))
            # the service demand's own points: each fix well below its limit (the ladders' steps near the limit
            # run throttled, where the CPU used is the quota whatever the queries)
            for name in order[0][:2]:
                for per_pct in DEMAND_PER_PCT:
                    r = load_step(client, name, clusters[name], int(per_pct * pct), QUOTA_STEP_S, pin, baseline,
                                  steer=pin["system"])
                    say(r, " (demand) throttled %s of %s periods" % (
                        (r["throttling"] or {}).get("nr_throttled"), (r["throttling"] or {}).get("nr_periods")))
                    demand.append(dict(r, quota_pct=pct))
            for rep, names in enumerate(order, 1):
                print("quota %g %%, repetition %d: %s" % (pct, rep, ", ".join(names)), flush=True)
                for name in names:
                    stock = name == base.CONFIGS[0][0]
                    lim, steps = one_ladder(client, name, clusters[name], STOCK_START if stock else QUOTA_START_PER_PCT
                                            * pct, pin, baseline, QUOTA_STEP_S, bisections=STOCK_BISECTIONS if stock
                                            else QUOTA_BISECTIONS, steer=pin["system"])
                    quota_limit_facts(lim, steps, pct, pin)
                    print("  %s at %g %%: holds at %s q/s, fails at %s q/s (%s; throttled %s; headroom %s)" % (
                        name, pct, lim["holds_at"], lim["fails_at"], lim["bound_by"], lim["throttled_share"],
                        lim["headroom"]), flush=True)
                    runs.append({"quota_pct": pct, "repetition": rep, "config": name, "limit": lim, "steps": steps})
                    result["quota"] = quota_summary(runs, order, demand_steps=demand)
                    save()
    finally:
        unsteer()
        for name, cluster, port in base.CONFIGS:
            with contextlib.suppress(docker.errors.APIError):
                client.containers.get(k3d.lb_name(cluster)).update(cpu_period=100000, cpu_quota=-1)
        clusters_down()
    result["quota"] = quota_summary(runs, order, demand_steps=demand)
    result["quota_table"] = quota_table(result["quota"])


# cost: where homelab.edge's CPU goes, against itself with one part taken out, at one quota (the budget's shared
# memory zone: a lock both nginx workers take for each UDP session; the 5-s timeout against the seed's 10 s)
COST_PCT = 5
COST_VARIANTS = (("homelab.edge", "bfix", 41200, None),
                 ("homelab.edge, no budget", "bnobud", 41800, "no budget"),
                 ("homelab.edge, 10-s timeout", "bto10", 41900, "10-s timeout"))
COST_RUN = os.environ.get("BENCH_COST_VARIANTS", "homelab.edge|homelab.edge, no budget|homelab.edge, 10-s timeout")
COST_REPETITIONS = int(os.environ.get("BENCH_COST_REPETITIONS", "3"))


def variant_template(text, change):
    """homelab.edge's confd template with one part changed: "no budget" drops the limit_conn lines (zone and
    limits), "10-s timeout" gives its UDP (dns) servers the seed's 10-s proxy_timeout; issue 65's hypotheses, one
    change each: "one worker" (worker_processes 1: no second worker to take the zone's lock on the same CPU), "zone
    per worker" (the zone keyed by $pid: each worker its own node, no lock shared between them), "reuseport" (a UDP
    socket per worker: the kernel spreads the datagrams, no worker woken for another's)."""
    if change == "no budget":
        out = "".join(line for line in text.splitlines(True) if "limit_conn" not in line)
    elif change == "10-s timeout":
        out = text.replace("    proxy_timeout 5s;\n", "    proxy_timeout 10s;\n")
    elif change == "one worker":
        out = text.replace("worker_processes auto;", "worker_processes 1;")
    elif change == "zone per worker":
        out = text.replace("limit_conn_zone $protocol zone=", "limit_conn_zone $pid zone=")
    elif change == "reuseport":
        out = text.replace('{{- if (eq $protocol "udp") }} udp{{- end -}};',
                           '{{- if (eq $protocol "udp") }} udp reuseport{{- end -}};')
    else:
        raise ValueError(change)
    if out == text:
        raise RuntimeError("the template has no %s part to change" % change)
    return out


def cost_part(client, result, save):
    """homelab.edge and each variant (COST_VARIANTS; BENCH_COST_VARIANTS names those to run, "|" between),
    ladders at COST_PCT of CPU 0 as in the quota part, COST_REPETITIONS (BENCH_COST_REPETITIONS) repetitions in
    a rotating order."""
    pin = base.pinning()
    if not pin:
        raise SystemExit("the cost ladders need two CPUs")
    variants = [v for v in COST_VARIANTS if v[0] in COST_RUN.split("|")]
    names = [v[0] for v in variants]
    order = [names[i:] + names[:i] for i in range(COST_REPETITIONS)]
    for name, cluster, port, change in variants:
        k3d.create(cluster, port)
    runs = []
    try:
        for name, cluster, port, change in variants:
            k3d.wait_serving(client, cluster)
        base.apply_role([v[1] for v in variants], keeper=False)
        for name, cluster, port, change in variants:
            c = client.containers.get(k3d.lb_name(cluster))
            if change:
                k3d_container.replace_file(c, k3d_container.TEMPLATE_PATH, variant_template(
                    lb_check.read(c, k3d_container.TEMPLATE_PATH), change))
                k3d_container.render(c, 30)
            base.pin_system([c, client.containers.get(k3d.server_name(cluster))], [], pin["system"])
            c.update(cpu_period=QUOTA_PERIOD_US, cpu_quota=int(QUOTA_PERIOD_US * COST_PCT / 100))
        os.sched_setaffinity(0, pin["generator"])
        base.set_affinity(base.engine_pids(), pin["system"])
        result["cost_setup"] = {"live_settings": base.live_settings(client, [v[:3] for v in variants]),
                                "steered_nodes": steer_receive([client.containers.get(k3d.server_name(v[1]))
                                                                for v in variants], pin["system"])}
        baseline = conntrack_count()
        clusters = dict((v[0], v[1]) for v in variants)
        for rep, names_ in enumerate(order, 1):
            print("cost at %d %%, repetition %d: %s" % (COST_PCT, rep, ", ".join(names_)), flush=True)
            for name in names_:
                lim, steps = one_ladder(client, name, clusters[name], QUOTA_START_PER_PCT * COST_PCT, pin, baseline,
                                        QUOTA_STEP_S, bisections=QUOTA_BISECTIONS, steer=pin["system"])
                quota_limit_facts(lim, steps, COST_PCT, pin)
                print("  %s: holds at %s q/s, fails at %s q/s (%s; throttled %s)" % (
                    name, lim["holds_at"], lim["fails_at"], lim["bound_by"], lim["throttled_share"]), flush=True)
                runs.append({"repetition": rep, "config": name, "limit": lim, "steps": steps})
                result["cost"] = {"quota_pct": COST_PCT, "orders": order, "repetitions": COST_REPETITIONS,
                                  "variants": names, "runs": runs}
                save()
    finally:
        unsteer()
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        base.set_affinity(base.engine_pids(), set(range(os.cpu_count())))
        k3d.delete(*[v[1] for v in variants])
    table = ["homelab.edge against itself with one part changed, each load balancer at %d %% of CPU 0: highest rate "
             "held (q/s) per repetition, median" % COST_PCT]
    for name in names:
        held = [r["limit"]["holds_at"] or 0 for r in runs if r["config"] == name and not r["limit"]["invalid_at"]]
        table.append("  %-28s %s; median %s" % (name, held, ladder.spread(held)["median"]))
    result["cost_table"] = table


# cpu (issue 65): what one DNS query costs each load balancer, measured to a few percent. Each load balancer alone on
# CPU 0, unthrottled (the others, the DNS server nodes, the engine, the generator and this process on CPU 1), at rates
# well under a core's worth, CPU_STEP_S per step, CPU_REPETITIONS repetitions in ABAB order (the configurations'
# order reversed every other repetition, the rates' too). The load balancer's CPU is its cgroup's (cpuacct.usage):
# nginx and confd, and the kernel's work on the datagrams nginx sends (processed on the sender's CPU: no RPS here),
# plus that CPU's ksoftirqd, where the kernel defers the part of that work that runs long.
# Rates: conntrack holds each query's two flows (client -> load balancer, load balancer -> DNS server) 30 s, and
# 3,000 q/s x 2 x 30 s = 180,000 stays under this machine's 262,144 entries
CPU_CONFIGS = (("stock", "bstock", 41000, None), ("seed's fix", "bseed", 41100, None),
               ("homelab.edge", "bfix", 41200, None), ("homelab.edge, no budget", "bnobud", 41800, "no budget"))
# the hypotheses, each homelab.edge with one change (variant_template), run by name (BENCH_CPU_CONFIGS)
CPU_HYPOTHESES = (("homelab.edge, one worker", "bone", 42000, "one worker"),
                  ("homelab.edge, zone per worker", "bzpw", 42100, "zone per worker"),
                  ("homelab.edge, reuseport", "breuse", 42200, "reuseport"),
                  ("homelab.edge, 10-s timeout", "bto10", 41900, "10-s timeout"))
CPU_RUN = os.environ.get("BENCH_CPU_CONFIGS", "|".join(c[0] for c in CPU_CONFIGS))
CPU_RATES = tuple(int(r) for r in os.environ.get("BENCH_CPU_RATES", "1000,2000,3000").split(","))
CPU_STEP_S = float(os.environ.get("BENCH_CPU_STEP_S", "60"))
CPU_REPETITIONS = int(os.environ.get("BENCH_CPU_REPETITIONS", "5"))
CPU_TICK_S = float(os.environ.get("BENCH_CPU_TICK_S", "0"))  # the generator paced per query (no tick)
CPU_PAIRS = (("homelab.edge", "seed's fix"), ("homelab.edge", "homelab.edge, no budget"),
             ("homelab.edge, no budget", "seed's fix")) + tuple(("homelab.edge", h[0]) for h in CPU_HYPOTHESES)
CPU_LB, CPU_REST = {0}, {1}
PROFILE_CONFIGS = ("seed's fix", "homelab.edge", "homelab.edge, no budget")
PROFILE_RATE, PROFILE_S, PROFILE_HZ = 3000, 20, 997


def busy_s(times):
    """A CPU's busy seconds in a cpu_times() reading: everything but idle and iowait."""
    return sum(v for k, v in times.items() if k not in ("idle", "iowait"))


ROOT_PERCPU = "/sys/fs/cgroup/cpuacct/cpuacct.usage_percpu"  # cgroup v1: every task's run time, per CPU, in ns
WORKQUEUE_CPUMASK = "/sys/devices/virtual/workqueue/cpumask"  # where the kernel's unbound workqueues may run


def percpu_run_s():
    """Seconds every task (the root cgroup: all of them) has run on each CPU, from the scheduler's own clock. The
    trial run showed /proc/stat's tick-sampled busy time off by up to half a step either way for work that wakes
    for 50 us at a time, so a step's disturbance is read here."""
    with open(ROOT_PERCPU) as f:
        return dict((i, int(v) / 1e9) for i, v in enumerate(f.read().split()))


def task_run_s(pid):
    """Seconds task `pid` has run, from the scheduler's own clock (/proc/PID/schedstat's first field); 0 if gone."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


@contextlib.contextmanager
def unbound_work_on(cpus):
    """The kernel's unbound workqueues (conntrack's garbage collection among them) kept to `cpus` meanwhile, put back
    after; where the file cannot be written, as it is."""
    old = None
    with contextlib.suppress(OSError):
        with open(WORKQUEUE_CPUMASK) as f:
            old = f.read().strip()
        with open(WORKQUEUE_CPUMASK, "w") as f:
            f.write("%x" % sum(1 << c for c in cpus))
    try:
        yield old
    finally:
        if old:
            with contextlib.suppress(OSError):
                with open(WORKQUEUE_CPUMASK, "w") as f:
                    f.write(old)


def cpu_clusters_up(client, configs):
    """The clusters of `configs` (CPU_CONFIGS rows), each configured as its name says, every container on CPU_REST."""
    for name, cluster, port, change in configs:
        k3d.create(cluster, port)
    for name, cluster, port, change in configs:
        k3d.wait_serving(client, cluster)
        if change:
            base.apply_role([cluster], keeper=False)
            c = client.containers.get(k3d.lb_name(cluster))
            k3d_container.replace_file(c, k3d_container.TEMPLATE_PATH, variant_template(
                lb_check.read(c, k3d_container.TEMPLATE_PATH), change))
            k3d_container.render(c, 30)
        else:
            base.configure(client, name, cluster)
        base.pin_system([client.containers.get(k3d.lb_name(cluster)), client.containers.get(k3d.server_name(cluster))],
                        [], CPU_REST)
    os.sched_setaffinity(0, CPU_REST)
    base.set_affinity(base.engine_pids(), CPU_REST)


def cpu_step(client, name, cluster, rate, seconds, baseline, tick=CPU_TICK_S, profile=None, binary=None):
    """One step: the configuration's load balancer moved alone onto CPU_LB, the lab's conntrack entries deleted,
    the generator on CPU_REST at `rate` for `seconds`; its cgroup's CPU, the DNS server's, both CPUs' busy time and
    the "not enough" lines over the run. `profile`: a perf.data path, CPU_LB sampled meanwhile (perf record -a)."""
    lbc = client.containers.get(k3d.lb_name(cluster))
    if name == "stock":  # out of connections at these rates: each step starts from none held (600 s each)
        lbc = k3d.restart_lb(client, cluster)
    lbc.update(cpuset_cpus=",".join(str(c) for c in sorted(CPU_LB)))
    server = client.containers.get(k3d.server_name(cluster))
    target = base.address(lbc)
    forget(sorted(set([target, base.address(server)] + lab_addresses(client))), baseline)
    time.sleep(1)  # the move done, the CPU settled
    dnsmasq = dnsmasq_pids(server)
    every = sorted(CPU_LB | CPU_REST)
    # the load balancer's CPU's softirq thread: the kernel's work on the datagrams nginx sends, deferred there when
    # it runs long (the trial at 3,000 q/s: 3 % of the CPU), is the load balancer's cost, outside its cgroup
    ksoft = ksoftirqd_pids(CPU_LB)
    lb0, dns0, times0, run0, ks0, t0 = (base.container_cpu_s(lbc), base.pids_cpu_s(dnsmasq), cpu_times(every),
                                        percpu_run_s(), sum(task_run_s(p) for p in ksoft), time.time())
    perf = None
    if profile:
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-C", ",".join(str(c) for c in sorted(CPU_LB)), "-e",
                                 "cpu-clock", "-F", str(PROFILE_HZ), "-g", "-o", profile, "--", "sleep",
                                 str(seconds + 1)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    r = dnsgen.run_compiled(target, [53, 1053], rate, seconds, timeout=TIMEOUT_S, cpus=CPU_REST, fifo=FIFO, tick=tick,
                            binary=binary)
    lb1, dns1, times1, run1, ks1, t1 = (base.container_cpu_s(lbc), base.pids_cpu_s(dnsmasq), cpu_times(every),
                                        percpu_run_s(), sum(task_run_s(p) for p in ksoft), time.time())
    if perf:
        perf.wait(seconds + 30)
    lbc.update(cpuset_cpus=",".join(str(c) for c in sorted(CPU_REST)))
    wall = t1 - t0
    lb_busy = sum(run1[c] - run0[c] for c in CPU_LB)
    rest_busy = sum(run1[c] - run0[c] for c in CPU_REST)
    own = (lb1 - lb0) + (ks1 - ks0)
    r.update(config=name, lb_cpu_s=round(own, 4), lb_cgroup_cpu_s=round(lb1 - lb0, 4),
             lb_ksoftirqd_s=round(ks1 - ks0, 4), dns_server_cpu_s=round(dns1 - dns0, 4),
             measured_s=round(wall, 3), lb_cpu_run_s=round(lb_busy, 4), other_cpu_run_s=round(rest_busy, 4),
             # what ran on the load balancer's CPU beside its cgroup and its softirq thread (every task's run time
             # there, less those)
             disturbance_share=round(max(0.0, lb_busy - own) / wall, 4),
             other_cpu_busy_share=round(rest_busy / (wall * len(CPU_REST)), 4),
             cpu_times_s=dict((str(c), dict((k, round(times1[c][k] - times0[c][k], 3)) for k in STAT_COLUMNS))
                              for c in every),
             alerts=probes.count_in_logs(lbc, probes.NOT_ENOUGH, t0))
    r["us_per_query"] = ladder.us_per_query(r)
    r["problems"] = ladder.cpu_step_problems(r)
    r["below_saturation"] = ladder.below_saturation(r)
    return r


def cpu_order(names, rates, repetitions):
    """(repetition, rate, configuration) in run order: each repetition the rates, and at each rate the
    configurations, in ABAB order (reversed every other repetition)."""
    out = []
    for rep, order in enumerate(ladder.abab(names, repetitions), 1):
        for rate in (rates if rep % 2 else tuple(reversed(rates))):
            out += [(rep, rate, n) for n in order]
    return out


def cpu_part(client, result, save):
    """What one DNS query costs each load balancer (CPU_CONFIGS; BENCH_CPU_CONFIGS names those to run, "|" between),
    then where it goes: perf profiles of CPU_LB under PROFILE_RATE for PROFILE_CONFIGS."""
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("the CPU part needs two CPUs: one for the load balancer, one for everything else")
    configs = [c for c in CPU_CONFIGS + CPU_HYPOTHESES if c[0] in CPU_RUN.split("|")]
    names, clusters = [c[0] for c in configs], dict((c[0], c[1]) for c in configs)
    plan = cpu_order(names, CPU_RATES, CPU_REPETITIONS)
    steps, profiles = [], {}
    stamp = os.path.splitext(os.path.basename(result["path"]))[0]
    # the build of these sources by its own name: the cache's link may be pointed at another checkout's meanwhile
    binary = os.path.realpath(dnsgen.compiled_binary())
    cpu_clusters_up(client, configs)
    unbound = unbound_work_on(CPU_REST)
    try:
        result["cpu_setup"] = {"workqueue_cpumask_before": unbound.__enter__(),  # put back in `finally`"live_settings": base.live_settings(client, [c[:3] for c in configs]),
                               "nginx_workers": dict((n, nginx_workers(client.containers.get(k3d.lb_name(c))))
                                                     for n, c in clusters.items()),
                               "cpus": {"load balancer": sorted(CPU_LB), "everything else": sorted(CPU_REST)}}
        baseline = conntrack_count()
        for i, (rep, rate, name) in enumerate(plan, 1):
            for attempt in range(1 + RETRIES):
                r = cpu_step(client, name, clusters[name], rate, CPU_STEP_S, baseline, binary=binary)
                r.update(repetition=rep, attempt=attempt + 1)
                steps.append(r)
                print("  [%d/%d] rep %d %-24s %5d q/s: %s us/query (lb %.3f s, %d answered of %d), others on its CPU %.1f %%, "
                      "CPU %s busy %.1f %%, generator %.1f us/query, %d alerts%s" % (
                          i, len(plan), rep, name, rate, None if r["us_per_query"] is None else
                          round(r["us_per_query"], 2), r["lb_cpu_s"], r["answered"], r["sent"],
                          100 * r["disturbance_share"], ",".join(map(str, sorted(CPU_REST))),
                          100 * r["other_cpu_busy_share"], 1e6 * r["generator_cpu_s"] / max(1, r["sent"]),
                          r["alerts"], "; INVALID: " + "; ".join(r["problems"]) if r["problems"] else ""),
                      flush=True)
                if not r["problems"]:
                    break
            result["cpu"] = cpu_record(steps, names)
            save()
        for name in [n for n in PROFILE_CONFIGS if n in names]:
            data = os.path.join(ROOT, "benchmarks", "results", "%s-profile-%s.data" % (stamp, slug(name)))
            r = cpu_step(client, name, clusters[name], PROFILE_RATE, PROFILE_S, baseline, profile=data, binary=binary)
            profiles[name] = profile_files(data, name, stamp, r)
            print("  profile %s: %s" % (name, profiles[name]["svg"]), flush=True)
            result["cpu_profiles"] = profiles
            save()
    finally:
        unbound.__exit__(None, None, None)
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        base.set_affinity(base.engine_pids(), set(range(os.cpu_count())))
        k3d.delete(*clusters.values())
    result["cpu"] = cpu_record(steps, names)
    result["cpu_table"] = cpu_table(result["cpu"])
    if profiles:
        result["cpu_profiles"] = profiles
        result["cpu_profile_table"] = profile_table(profiles)


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def cpu_record(steps, names):
    return {"configs": names, "rates": list(CPU_RATES), "step_s": CPU_STEP_S, "repetitions": CPU_REPETITIONS,
            "tick_s": CPU_TICK_S, "order": "ABAB: configurations and rates reversed every other repetition",
            "max_disturbance": ladder.MAX_DISTURBANCE, "max_other_cpu_busy": ladder.MAX_OTHER_CPU_BUSY,
            "steps": steps, "summary": ladder.cpu_summary(steps, names, list(CPU_RATES),
                                                          [p for p in CPU_PAIRS if p[0] in names and p[1] in names])}


def _ci(c, scale=1.0, digits=1):
    if not c or c.get("mean") is None:
        return "-"
    if c.get("half") is None:
        return "%.*f (n=1)" % (digits, c["mean"] * scale)
    return "%.*f [%.*f, %.*f]" % (digits, c["mean"] * scale, digits, c["low"] * scale, digits, c["high"] * scale)


def cpu_table(cpu):
    s = cpu["summary"]
    out = ["load balancer CPU per answered DNS query (us), each alone on CPU %s and unthrottled, the generator and "
           "the DNS server on CPU %s; %g-s steps, %d repetitions in ABAB order; mean [95 %% interval] over the "
           "valid repetitions (* : the load was not carried whole: queries lost, p99 over 50 ms or 'not enough' lines)"
           % (",".join(map(str, sorted(CPU_LB))), ",".join(map(str, sorted(CPU_REST))), cpu["step_s"],
              cpu["repetitions"]),
           "  %-24s | %s | %s" % ("", " | ".join("%22s" % ("%d q/s" % r) for r in cpu["rates"]),
                                  "marginal us/query [95 %]")]
    for name in cpu["configs"]:
        c = s["configs"][name]
        cells = []
        for rate in cpu["rates"]:
            pr = c["per_rate"][str(rate)]
            cells.append("%22s" % (_ci(pr) + ("*" if pr.get("below_saturation") is False else "")))
        m = c["marginal"]
        out.append("  %-24s | %s | %s" % (name, " | ".join(cells), "-" if not m else "%.1f [%.1f, %.1f]" % (
            m["slope"] * 1e6, m["low"] * 1e6, m["high"] * 1e6)))
    out.append("difference, paired by repetition: a / b - 1 in %, mean [95 % interval]")
    for key, p in sorted(s["pairs"].items()):
        cells = ["%22s" % _ci(p["per_rate"][str(r)]["relative"], 100) for r in cpu["rates"]]
        out.append("  %-24s | %s | over the rates %s" % (key[:24], " | ".join(cells), _ci(p["relative_over_rates"], 100)))
        out.append("  %-24s   (%s)" % ("", key))
    invalid = [st for st in cpu["steps"] if st["problems"]]
    out.append("steps: %d, invalid and run again: %d%s" % (len(cpu["steps"]), len(invalid), "".join(
        "\n  invalid: rep %d %s %d q/s attempt %d: %s" % (st["repetition"], st["config"], st["rate"], st["attempt"],
                                                        "; ".join(st["problems"])) for st in invalid)))
    return out


# ------------------------------------------------------------ profiles: perf's samples as flame graphs (SVG)
def profile_files(data, name, stamp, step):
    """perf.data -> folded stacks (one line per distinct stack: frames root first, ';' between, and its count) and a
    flame graph SVG beside it; the step's own figures with them. perf.data itself is not kept (large, and bound to
    this machine's binaries)."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"], capture_output=True, text=True,
                         check=False)
    folded, idle = flame.busy(flame.fold(out.stdout))
    base_path = os.path.join(os.path.dirname(data), "%s-profile-%s" % (stamp, slug(name)))
    with open(base_path + ".folded", "w") as f:
        for stack, n in sorted(folded.items()):
            f.write("%s %d\n" % (stack, n))
    with open(base_path + ".svg", "w") as f:
        f.write(flame.svg(folded, "%s: CPU %s under %d q/s, %d s (perf cpu-clock, %d Hz; %d idle samples left out)" % (
            name, ",".join(map(str, sorted(CPU_LB))), PROFILE_RATE, PROFILE_S, PROFILE_HZ, idle)))
    with contextlib.suppress(OSError):
        os.unlink(data)
    return {"svg": os.path.relpath(base_path + ".svg", ROOT), "folded": os.path.relpath(base_path + ".folded", ROOT),
            "samples": sum(folded.values()), "idle_samples": idle, "functions": flame.shares(folded, "self", 25),
            "inclusive": flame.shares(folded, "total", 40), "step": dict(
                (k, step.get(k)) for k in ("rate", "answered", "sent", "lb_cpu_s", "us_per_query", "valid", "problems",
                                           "disturbance_share")), "perf_errors": out.stderr[-500:]}


def profile_table(profiles):
    names = list(profiles)
    funcs = []
    for n in names:
        for f, share in profiles[n]["functions"]:
            if f not in funcs:
                funcs.append(f)
    out = ["where CPU %s's busy time went under %d q/s (share of its busy samples spent in each function itself, %%; "
           "the load balancer alone on that CPU; idle samples left out), by configuration"
           % (",".join(map(str, sorted(CPU_LB))), PROFILE_RATE),
           "  %-44s | %s" % ("function", " | ".join("%24s" % n[:24] for n in names))]
    for f in funcs[:30]:
        cells = []
        for n in names:
            d = dict(profiles[n]["functions"])
            cells.append("%24s" % ("%.2f" % d[f] if f in d else "-"))
        out.append("  %-44s | %s" % (f[:44], " | ".join(cells)))
    out.append("  %-44s | %s" % ("busy samples", " | ".join("%24d" % profiles[n]["samples"] for n in names)))
    out.append("  %-44s | %s" % ("idle samples", " | ".join("%24d" % profiles[n]["idle_samples"] for n in names)))
    return out


def quota_settings():
    return {"quotas_pct": list(QUOTAS_PCT), "period_us": QUOTA_PERIOD_US, "step_s": QUOTA_STEP_S,
            "repetitions": QUOTA_REPETITIONS, "start_per_pct": QUOTA_START_PER_PCT, "bisections": QUOTA_BISECTIONS,
            "stock": {"start": STOCK_START, "bisections": STOCK_BISECTIONS}, "headroom_required": HEADROOM,
            "agree_within": ladder.AGREE_WITHIN, "demand_per_pct": list(DEMAND_PER_PCT),
            "unsaturated_throttled": ladder.UNSATURATED_THROTTLED}


COMPONENTS = ("load balancer", "DNS server", "generator")


def quota_summary(runs, order, settings=None, demand_steps=()):
    """The runs, and per quota: each configuration's limits with their spread, the ratio homelab.edge / the
    seed's fix per repetition, each component's service demand (CPU-seconds per answered query, regressed over
    the steps that held; CPU 0's softirq too), the capacity computed from the load balancer's against the
    ladder's, and the least headroom of the generator and the DNS server at the failing steps."""
    settings = settings or quota_settings()
    by_quota = {}
    for pct in settings["quotas_pct"]:
        here = [r for r in runs if r["quota_pct"] == pct]
        if not here:
            continue
        out = {}
        for name, cluster, port in base.CONFIGS:
            mine = [r for r in here if r["config"] == name]
            valid = [r for r in mine if not r["limit"]["invalid_at"]]  # a ladder that held nothing: limit 0
            held = [s for r in mine for s in r["steps"] if ladder.unsaturated(s) and s["valid"]] + [
                s for s in demand_steps if s["quota_pct"] == pct and s["config"] == name and ladder.unsaturated(s)
                and s["valid"]]
            demand = dict((c, ladder.service_demand([(s["answered"], s["cpu_s"].get(c)) for s in held]))
                          for c in COMPONENTS)
            demand["softirq (CPU 0)"] = ladder.service_demand(
                [(s["answered"], sum((s.get("softirq_s") or {}).values())) for s in held])
            lb = demand["load balancer"]
            holds = ladder.spread([r["limit"]["holds_at"] or 0 for r in valid])
            fails = ladder.spread([r["limit"]["fails_at"] for r in valid])
            bound = sorted(set(str(r["limit"]["bound_by"]) for r in valid))
            # a capacity from CPU demand says something only where the quota is what ran out: it is set against
            # the repetitions that ran out of CPU (the others failed on latency or connections first)
            on_cpu = [r for r in valid if str(r["limit"]["bound_by"]).startswith("CPU (load balancer")]
            cpu_bound = bool(on_cpu)
            walls = [s["wall_s"] for s in held if s.get("wall_s")]
            fixed = lb["fixed_s"] / (sum(walls) / len(walls)) if lb and walls and lb["fixed_s"] > 0 else 0.0
            agree = ladder.capacity_agrees(pct / 100.0, lb["per_query_s"] if lb else None,
                                           ladder.spread([r["limit"]["holds_at"] for r in on_cpu])["median"],
                                           ladder.spread([r["limit"]["fails_at"] for r in on_cpu])["median"],
                                           fixed) if cpu_bound else None
            if agree:
                agree.update(fixed_cores=round(fixed, 4), against_repetitions=len(on_cpu))
            agree_on = ladder.spread([r["limit"]["holds_at"] for r in on_cpu])["median"]
            rooms = [r["limit"].get("headroom") or {} for r in valid]
            least = dict((c, min([h[c] for h in rooms if h.get(c) is not None] or [None], key=lambda v: v or 0))
                         for c in ("generator", "DNS server"))
            out[name] = {"holds_at": holds, "fails_at": fails, "valid_repetitions": len(valid),
                         "repetitions": len(mine), "bound_by": bound, "service_demand": demand,
                         "capacity_from_demand": agree, "least_headroom": least,
                         "headroom_enough": all(v is not None and v >= settings["headroom_required"]
                                                for v in least.values()),
                         "whole_core_computed_qps": round(agree_on * 100.0 / pct) if agree_on else None}
        seed, edge = base.CONFIGS[1][0], base.CONFIGS[2][0]

        def per_rep(name):
            return [next((r["limit"]["holds_at"] for r in here if r["config"] == name and r["repetition"] == rep
                          and not r["limit"]["invalid_at"]), None) for rep in range(1, len(order) + 1)]
        out["ratio homelab.edge / seed's fix"] = ladder.ratios(per_rep(edge), per_rep(seed))
        by_quota["%g" % pct] = out
    return dict(settings, orders=order, by_quota=by_quota, runs=runs, demand_steps=list(demand_steps))


def quota_table(q):
    out = ["each load balancer held to a CPU quota (%d us period) on CPU 0 with the DNS server; generator and probes on "
           "CPU 1; %d-s steps; highest rate held (q/s), median [min-max] of the valid repetitions; each repetition: "
           "held/failed, what ran out, share of periods throttled and the headroom (computed: available / used) of "
           "the generator and the DNS server at the failing step" % (q["period_us"], q["step_s"])]
    for pct, per in sorted(q["by_quota"].items(), key=lambda kv: float(kv[0])):
        out.append("quota %s %% (%d us of %d):" % (pct, q["period_us"] * float(pct) / 100, q["period_us"]))
        for name, cluster, port in base.CONFIGS:
            c = per[name]
            h, d = c["holds_at"], c["service_demand"]
            reps = [r for r in q["runs"] if r["quota_pct"] == float(pct) and r["config"] == name]
            out.append("  %-13s holds at %s [%s-%s] (%d of %d valid); each: %s" % (
                name, h["median"], h["min"], h["max"], c["valid_repetitions"], c["repetitions"],
                "; ".join("%s/%s %s, throttled %s, headroom %s / %s" % (
                    r["limit"]["holds_at"], r["limit"]["fails_at"], r["limit"].get("bound_by"),
                    r["limit"].get("throttled_share"), (r["limit"].get("headroom") or {}).get("generator"),
                    (r["limit"].get("headroom") or {}).get("DNS server")) for r in reps)))
            out.append("  %-13s service demand, us per answered query (regressed over the steps held below saturation): %s" % (
                "", ", ".join("%s %s" % (k, "-" if not v else "%.1f (%d steps)" % (v["per_query_s"] * 1e6, v["points"]))
                              for k, v in sorted(d.items()))))
            a = c["capacity_from_demand"]
            if a is None:
                out.append("  %-13s no capacity computed: not bound by its quota (%s)" % ("", ", ".join(c["bound_by"])))
            else:
                out.append("  %-13s capacity computed from the load balancer's demand, (quota - %.1f %% fixed) / demand: "
                           "%s q/s, %s the ladder's in the %d repetition(s) that ran out of CPU" % (
                               "", 100 * a.get("fixed_cores", 0), a["computed_qps"],
                               "agrees with" if a["agrees"] else "DISAGREES with", a.get("against_repetitions", 0)))
            if c["whole_core_computed_qps"]:
                out.append("  %-13s a whole core, computed (the CPU-bound repetitions' median x 100 / %s): %s q/s" % (
                    "", pct, c["whole_core_computed_qps"]))
            out.append("  %-13s least headroom: generator %s, DNS server %s (%s)" % (
                "", c["least_headroom"]["generator"], c["least_headroom"]["DNS server"],
                "at least %dx" % q["headroom_required"] if c["headroom_enough"] else
                "UNDER %dx" % q["headroom_required"]))
        r = per["ratio homelab.edge / seed's fix"]
        out.append("  ratio homelab.edge / seed's fix (highest rate held, per repetition): median %s [%s-%s] over %d "
                   "repetitions (%s)" % (None if r["median"] is None else round(r["median"], 3),
                                         r["min"] and round(r["min"], 3), r["max"] and round(r["max"], 3), r["n"],
                                         r["each"]))
    return out


def quota_report(path):
    """The quota summary and table computed again from a saved result's runs (its own settings), saved beside
    the run's own as "quota_report" / "quota_report_table" with the commit that computed them."""
    with open(path) as f:
        result = json.load(f)
    q = result["quota"]
    settings = dict((k, q[k]) for k in quota_settings() if k in q)
    report = quota_summary(q["runs"], q["orders"], dict(quota_settings(), **settings), q.get("demand_steps", ()))
    report.pop("runs")
    report.pop("demand_steps")
    report["computed_by"] = {"commit": git_commit(), "date": time.strftime("%FT%T%z"),
                             "from": "the runs saved in this file"}
    result["quota_report"], result["quota_report_table"] = report, quota_table(dict(report, runs=q["runs"]))
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for line in result["quota_report_table"]:
        print(line)


def git_commit():
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


SLOW = {"key": "slow", "delay_s": SLOW_DELAY_S, "rates": SLOW_RATES, "step_s": SLOW_STEP_S, "pool": SLOW_POOL,
        "timeout_s": SLOW_TIMEOUT_S, "repetitions": 1}
# separation: the slow upstream's delay raised until the seed's fix's connections run out at a rate this machine
# offers with room to spare: each answer 4 s late (under homelab.edge's 5-s UDP timeout, so both fixes can answer)
# holds a session of 2 connections 4 s, and 4,096 connections per worker / (2 x 4 s) = 512 q/s per worker (computed);
# homelab.edge's budget (1,024 sessions: 50 % of 4,096 / 2) caps DNS at 1,024 / 4 = 256 q/s (computed) and keeps
# the rest for HTTPS and the API. The rates fall between those figures (on one, noise decides), each step 10 s (at
# least twice the delay: the sessions reach their steady count). 1,536 q/s x 4.3 s holds about 6,600 of the
# generator's 8,192 sockets
SEPARATION = {"key": "separation", "delay_s": 4.0, "rates": (192, 384, 768, 1536), "step_s": 10, "pool": 8192,
              "timeout_s": 4.3, "repetitions": 3}


def slow_part(client, result, save=None, plan=None):
    """The DNS server slow but alive at rising rates, the seed's fix and homelab.edge (alternating, ABAB, when
    repeated): DNS answered and HTTPS/API probes ok at each rate. `plan`: SLOW (default) or SEPARATION."""
    plan = plan or SLOW
    pin = base.pinning()
    steps, workers = [], {}
    order = ladder.alternating([n for n, c, p in base.CONFIGS[1:]], [], plan["repetitions"])
    clusters = dict((n, c) for n, c, p in base.CONFIGS)
    clusters_up(client, pin)
    baseline = conntrack_count()  # with the clusters up: their own traffic is no leftover of a step
    live = base.live_settings(client, base.CONFIGS[1:])
    try:
        for rep, names in enumerate(order, 1):
            for name in names:
                server = client.containers.get(k3d.server_name(clusters[name]))
                for rate in plan["rates"]:
                    with slow_upstream(server, plan["delay_s"], pin["system"] if pin else None) as slow_pid:
                        r = load_step(client, name, clusters[name], rate, plan["step_s"], pin, baseline,
                                      timeout=plan["timeout_s"], slow=slow_pid, pool=plan["pool"])
                    r["nginx_workers"] = nginx_workers(client.containers.get(k3d.lb_name(clusters[name])))
                    workers.setdefault(name, []).append(r["nginx_workers"])
                    r["repetition"] = rep
                    r["answered_share"] = round(r["answered"] / float(r["sent"]), 4) if r["sent"] else None
                    p = r["probes"]
                    r["probes_ok_share"] = round(p["ok"] / float(p["planned"]), 4) if p["planned"] else None
                    steps.append(r)
                    say(r)
                if save:
                    result[plan["key"]] = dict(((k, list(v) if isinstance(v, tuple) else v) for k, v in plan.items()),
                                               steps=steps, nginx_workers=workers, live_settings=live)
                    save()
    finally:
        clusters_down()
    result[plan["key"]] = dict(((k, list(v) if isinstance(v, tuple) else v) for k, v in plan.items()), steps=steps,
                               nginx_workers=workers, live_settings=live)
    out = ["DNS server %.1f s slow: DNS answered of sent; HTTPS+API probes ok of planned; 'not enough' lines "
           "(%d s at each rate; invalid: the generator was not); nginx workers %s; live %s" % (
               plan["delay_s"], plan["step_s"], json.dumps(dict((k, sorted(set(v))) for k, v in workers.items()),
                                                           sort_keys=True), json.dumps(live, sort_keys=True)),
           "  %-13s | %s" % ("", " | ".join("%22s" % ("%d q/s" % r) for r in plan["rates"]))]
    for rep in range(1, plan["repetitions"] + 1):
        for name, cluster, port in base.CONFIGS[1:]:
            cells = []
            for rate in plan["rates"]:
                r = next(s for s in steps if s["config"] == name and s["rate"] == rate and s["repetition"] == rep)
                cells.append("invalid" if not r["valid"] else "%d/%d; %d/%d; %d" % (
                    r["answered"], r["sent"], r["probes"]["ok"], r["probes"]["planned"], r["alerts"]))
            out.append("  %-13s | %s" % (name if plan["repetitions"] == 1 else "%s %d" % (name[:11], rep),
                                         " | ".join("%22s" % c for c in cells)))
    result[plan["key"] + "_table"] = out


def separation_part(client, result, save=None):
    slow_part(client, result, save, SEPARATION)


def first_not_enough(container, since):
    """Seconds from `since` to the load balancer's first "not enough" line, or None."""
    raw = container.logs(timestamps=True, since=int(since)).decode("utf-8", "replace")
    for line in raw.splitlines():
        if probes.NOT_ENOUGH in line:
            stamp = line.split(" ", 1)[0]  # 2026-12-04T15:30:01.123456789Z
            t = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:].rstrip("Z"))
            return round(t - since, 1)
    return None


def nginx_workers(container):
    return sum(1 for p in container.top(ps_args="-o pid,args")["Processes"] if "nginx: worker process" in p[-1])


def lowrate_part(client, result, save=None):
    pin = base.pinning()
    names = ["blow%d" % r for r in LOW_RATES]
    for name, port in zip(names, LOW_PORTS):
        k3d.create(name, port)
    out, threads = {}, []
    try:
        lbs = {}
        for name in names:
            k3d.wait_serving(client, name)
            lbs[name] = base.fresh(client, name)  # no session from wait_serving's checks
        workers = nginx_workers(lbs[names[0]])
        t0 = time.time()

        def one(name, rate):
            bound = 1.5 * 1024 / (2.0 * rate) + 30
            lbc = lbs[name]
            r = dnsgen.run_compiled(base.address(lbc), [53, 1053], rate, bound, timeout=2.0,
                                    cpus=pin["generator"] if pin else None, fifo=FIFO if pin else None)
            r["first_not_enough_s"] = first_not_enough(lbc, t0)
            r["computed_s"] = round(1024 / (2.0 * rate), 1)
            r["bound_s"] = round(bound, 1)
            out[rate] = r
        for name, rate in zip(names, LOW_RATES):
            t = threading.Thread(target=one, args=(name, rate), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(1.5 * 1024 / 2.0 + 120)
    finally:
        k3d.delete(*names)
    result["lowrate"] = {"nginx_workers": workers, "rates": dict((str(k), v) for k, v in sorted(out.items()))}
    lines = ["stock k3d at low rates (%s nginx workers): seconds to the first 'not enough' line, measured vs computed "
             "1024 / (2 x rate)" % workers]
    for rate in LOW_RATES:
        r = out.get(rate)
        if r is None:
            lines.append("  %2d q/s: no result" % rate)
            continue
        lines.append("  %2d q/s: %s s measured (computed %s s; load %s: %d planned, %d sent, %d answered)" % (
            rate, r["first_not_enough_s"] if r["first_not_enough_s"] is not None else "none within %s" % r["bound_s"],
            r["computed_s"], "valid" if r["valid"] else "INVALID (%s)" % r["invalid_because"], r["planned"], r["sent"],
            r["answered"]))
    result["lowrate_table"] = lines
    for line in lines:
        print(line, flush=True)


def main():
    if sys.argv[1:2] == ["report"]:
        return quota_report(sys.argv[2])
    parts = sys.argv[1:] or ["ladder", "slow", "lowrate"]  # quota: by name only (about 80 minutes)
    client = docker.from_env()
    dnsgen.compiled_binary()  # refuses a generator of other sources before anything starts
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                          "docker": client.version()["Version"], "k3d": k3d.k3d("version").stdout.split("\n")[0],
                          "kernel": platform.release(), "cpu_model": base.cpu_model(), "dnsgen": dnsgen.go_sources_hash(),
                          "date": time.strftime("%FT%T%z"), "commit": git_commit()}}
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", "k3d_ladder-%s.json" % time.strftime("%Y%m%dT%H%M%S"))

    result["path"] = os.path.relpath(path, ROOT)

    def save():  # after each part (and each quota ladder): nothing measured before a failure is lost
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    for name, part in (("lowrate", lowrate_part), ("ladder", ladder_part), ("slow", slow_part),
                       ("quota", quota_part), ("separation", separation_part), ("cost", cost_part),
                       ("cpu", cpu_part)):
        if name in parts:
            part(client, result, save)
            save()
    for key in ("ladder_table", "slow_table", "lowrate_table", "quota_table", "separation_table", "cost_table",
                "cpu_table", "cpu_profile_table"):
        for line in result.get(key, []):
            print(line)
    print("saved %s" % path)


if __name__ == "__main__":
    main()
