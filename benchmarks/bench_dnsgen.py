#!/usr/bin/env python
"""The compiled DNS generator's ceiling on this machine (issue 35).

Before a DNS figure through k3d's load balancer can be read as the load
balancer's, the generator must be shown to reach the load without being the
bottleneck itself. Here it loads a real DNS server on loopback that costs
as little per query as one can: dnsmasq (Debian's dnsmasq-base; `apt-get
install dnsmasq-base`), answering every *.lab name from its own config (no
upstream, nothing to look up), on 127.0.0.1 at a free port, pinned to CPU 0.
The generator (tests/support/loadgen_go/cmd/dnsgen; `lab/lab.sh gobins` builds it) runs
pinned to CPU 1 under SCHED_FIFO, a fresh source port per query, at RATES
for STEP_S each, from 1,000 to 40,000 queries/s. Each step is judged by
dnsgen.compiled_validity (no send errors, p99 lateness under 1 ms, the
generator's CPU under 70 % of its core, no UDP send-buffer or conntrack
insert failures, every planned query sent); the ceiling is the highest valid
step. What dnsmasq drops (RcvbufErrors: its socket overflowed) and answer
latency are the server's side, shown beside.

Issue 65 adds the generator's own CPU per query (the `us/q` column: its user +
system time over the queries sent), what its cost is measured by, and three
options: `--binary PATH` (an earlier build, to compare), `--tick S` (the least
time between its wake-ups while sending) and `--rates R1,R2,...`; with any of
them the result goes to benchmarks/results/dnsgen-<label>.json (`--label`).

Prints one table and saves JSON with machine info and versions to
benchmarks/results/dnsgen-ceiling.json. Traffic goes only to 127.0.0.1;
each step is bounded (STEP_S x 1.1 + 0.5 s + the reply timeout) and dnsmasq
by BOUND_S; about 45 s in all.
"""
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support")]
import dnsgen  # noqa: E402
import probes  # noqa: E402
from bench_edge_outage import machine  # noqa: E402
from bench_k3d_serverlb import cpu_model  # noqa: E402

RATES = (1000, 2000, 5000, 10000, 20000, 40000)
STEP_S = 5
TIMEOUT_S = 1.0
FIFO = 10  # the generator's real-time priority: the machine's other tasks cannot make it late
CPUS = {"server": {0}, "generator": {1}}
BOUND_S = 120  # dnsmasq is killed by then, whatever happens to this script
RESULT = os.path.join(ROOT, "benchmarks", "results", "dnsgen-ceiling.json")


def free_udp_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def answers(port, timeout=0.2):
    """One query to 127.0.0.1:port is answered."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(probes.dns_query_packet(4242), ("127.0.0.1", port))
        return bool(probes.dns_answered(s.recv(512), 4242))
    except OSError:
        return False
    finally:
        s.close()


def start_dnsmasq(binary, port, log):
    """dnsmasq in the foreground on 127.0.0.1:port, pinned to the server's
    CPU, answering *.lab with 127.0.0.1 from its config alone; returns the
    process once it answers."""
    cmd = ["timeout", str(BOUND_S), "taskset", "-c", ",".join(map(str, sorted(CPUS["server"]))), binary,
           "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--address=/lab/127.0.0.1",
           "--listen-address=127.0.0.1", "--bind-interfaces", "--port=%d" % port, "--cache-size=10000",
           "--pid-file=", "--log-facility=-"]
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    for dummy in range(50):
        if answers(port):
            return p
        if p.poll() is not None:
            break
        time.sleep(0.1)
    stop(p)
    log.seek(0)
    raise RuntimeError("dnsmasq did not answer on 127.0.0.1:%d: %s" % (port, log.read().decode(errors="replace")))


def stop(p):
    p.terminate()
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def step(port, rate, binary=None, tick=None):
    load0 = os.getloadavg()[0]
    r = dnsgen.run_compiled("127.0.0.1", [port], rate, STEP_S, timeout=TIMEOUT_S, cpus=CPUS["generator"], fifo=FIFO,
                            tick=tick, binary=binary)
    r["loadavg_1m_before"] = load0
    r["generator_us_per_query"] = round(1e6 * r["generator_cpu_s"] / r["sent"], 1) if r["sent"] else None
    return r


def ms(v):
    return "-" if v is None else "%.3f" % (1000 * v)


def table(steps, info):
    lines = ["dnsgen %s against dnsmasq %s on 127.0.0.1: generator on CPU %s (%s), dnsmasq on CPU %s, %d s per step"
             % (info["dnsgen"], info["dnsmasq"], ",".join(map(str, sorted(CPUS["generator"]))), steps[0]["sched"],
                ",".join(map(str, sorted(CPUS["server"]))), STEP_S),
             "%7s %7s %7s %8s %5s %21s %21s %6s %6s %7s %7s %5s  %s" % (
                 "q/s", "planned", "sent", "answered", "errs", "late p50/p99/max ms", "answer p50/p99/max ms",
                 "gen%", "us/q", "sndbuf", "rcvbuf", "load", "valid")]
    for r in steps:
        cpu = 100 * r["generator_cpu_s"] / r["wall_s"] if r["wall_s"] else 0
        lines.append("%7d %7d %7d %8d %5d %21s %21s %6.1f %6s %7s %7s %5.2f  %s" % (
            r["rate"], r["planned"], r["sent"], r["answered"], r["send_errors"],
            "/".join(ms(r[k]) for k in ("lateness_p50_s", "lateness_p99_s", "lateness_max_s")),
            "/".join(ms(r[k]) for k in ("latency_p50_s", "latency_p99_s", "latency_max_s")),
            cpu, r.get("generator_us_per_query"), r["snd_buf_errors"], r["rcv_buf_errors"], r["loadavg_1m_before"],
            "yes" if r["valid"] else "no: " + r["invalid_because"]))
    valid = [r["rate"] for r in steps if r["valid"]]
    lines.append("ceiling: %s q/s (the highest valid step; gen%% = the generator's CPU over the step's wall time, "
                 "us/q = its CPU per query sent; rcvbuf = UDP receive-buffer drops in the namespace: dnsmasq's)"
                 % ("{:,}".format(int(max(valid))) if valid else "none"))
    return lines


def versions(dnsmasq):
    go = shutil.which("go")
    return {"dnsmasq": subprocess.run([dnsmasq, "--version"], capture_output=True, text=True,
                                      check=True).stdout.split("\n")[0].split()[2],
            "go": subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip() if go else None,
            "kernel": platform.release(), "cpu_model": cpu_model()}


def options(argv):
    """--binary PATH, --tick S, --rates R1,R2,..., --label NAME: (binary, tick, rates, label)."""
    opts = {"--binary": None, "--tick": None, "--rates": None, "--label": None}
    it = iter(argv)
    for a in it:
        if a not in opts:
            sys.exit("bench_dnsgen.py [--binary PATH] [--tick S] [--rates R1,R2,...] [--label NAME]: not %r" % a)
        opts[a] = next(it, None)
    rates = tuple(int(r) for r in opts["--rates"].split(",")) if opts["--rates"] else RATES
    tick = float(opts["--tick"]) if opts["--tick"] else None
    return opts["--binary"], tick, rates, opts["--label"]


def main():
    binary, tick, rates, label = options(sys.argv[1:])
    bin_dnsmasq = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.path.exists("/usr/sbin/dnsmasq") else None)
    if not bin_dnsmasq:
        sys.exit("bench_dnsgen needs dnsmasq: apt-get install dnsmasq-base")
    if not binary:
        dnsgen.compiled_binary()  # says what to run when it is missing, before anything starts
    info = dict(machine(), **versions(bin_dnsmasq))
    port = free_udp_port()
    steps = []
    with tempfile.TemporaryFile() as log:
        server = start_dnsmasq(bin_dnsmasq, port, log)
        try:
            for rate in rates:
                steps.append(step(port, rate, binary, tick))
                print("  %6d q/s: %s" % (rate, "valid" if steps[-1]["valid"] else steps[-1]["invalid_because"]),
                      flush=True)
        finally:
            stop(server)
    info["dnsgen"] = steps[0]["build"]
    lines = table(steps, info)
    valid = [r["rate"] for r in steps if r["valid"]]
    result = {"machine": info, "conditions": {
        "rates": rates, "step_s": STEP_S, "tick_s": tick, "binary": binary, "timeout_s": TIMEOUT_S,
        "generator_fifo": FIFO,
        "cpus": dict((k, sorted(v)) for k, v in CPUS.items()), "server": "dnsmasq --address=/lab/127.0.0.1",
        "query": probes.QNAME, "validity": {"max_p99_lateness_s": dnsgen.COMPILED_MAX_P99_LATENESS_S,
                                            "max_cpu_share": dnsgen.COMPILED_MAX_CPU_SHARE}},
        "steps": steps, "ceiling_qps": int(max(valid)) if valid else None, "dns_tables": lines}
    path = RESULT if not (binary or tick or label or rates != RATES) else os.path.join(
        os.path.dirname(RESULT), "dnsgen-%s.json" % (label or time.strftime("%Y%m%dT%H%M%S")))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(lines))
    print("saved %s" % path)


if __name__ == "__main__":
    main()
