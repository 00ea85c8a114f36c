#!/usr/bin/env python3
"""On a lab host (the NAS), once a second for SECONDS seconds: the CPU a
process uses (Traefik's, % of one core), the host's conntrack entries, and
the TCP sockets in TIME_WAIT and FIN_WAIT in that process's network
namespace, and the process's open files and threads. One JSON line per second.

With --cpu N (seed 001's NAS, pinned to core N) also: that core's user,
system, softirq, irq, iowait and idle time (% of the core, /proc/stat); in
the process's own network namespace (/proc/PID/net, no nsenter): its
conntrack entries, TCP sockets in use, orphans and TIME_WAIT (sockstat), and
listen-queue overflows and drops in that second (TcpExt); and the process's
cgroup CPU throttling in that second (cpu.stat: periods throttled, time).

  host_sampler.py PID SECONDS [--cpu N]
"""
import json
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def files_and_threads(pid):
    """(open file descriptors, threads) of the process: sockets, files and the Go runtime's threads."""
    try:
        fds = len(os.listdir("/proc/%d/fd" % pid))
        with open("/proc/%d/status" % pid) as f:
            threads = int(next(ln.split()[1] for ln in f if ln.startswith("Threads:")))
        return fds, threads
    except (OSError, StopIteration, ValueError):
        return None, None


def conntrack():
    try:
        with open("/proc/sys/net/netfilter/nf_conntrack_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def sockets(pid):
    out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-Htan"], capture_output=True, text=True,
                         check=False).stdout
    states = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    return states.count("TIME-WAIT"), sum(1 for s in states if s.startswith("FIN-WAIT")), len(states)


def core_ticks(cpu):
    """{mode: ticks} of one core, /proc/stat's cpuN line."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu%d " % cpu):
                return dict(zip(CPU_MODES, (int(v) for v in line.split()[1:1 + len(CPU_MODES)])))
    return None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def netns(pid):
    """The process's own namespace: conntrack entries, sockstat's TCP line, TcpExt's listen counters."""
    out = {}
    stat = read("/proc/%d/net/stat/nf_conntrack" % pid)
    if stat and len(stat.splitlines()) > 1:
        out["ns_conntrack"] = int(stat.splitlines()[1].split()[0], 16)  # "entries": the namespace's count
    for line in (read("/proc/%d/net/sockstat" % pid) or "").splitlines():
        if line.startswith("TCP:"):
            f = line.split()[1:]
            tcp = dict(zip(f[0::2], (int(v) for v in f[1::2])))
            out.update(ns_tcp_inuse=tcp.get("inuse"), ns_orphan=tcp.get("orphan"), ns_time_wait=tcp.get("tw"))
    lines = [ln.split() for ln in (read("/proc/%d/net/netstat" % pid) or "").splitlines() if ln.startswith("TcpExt:")]
    if len(lines) == 2:
        ext = dict(zip(lines[0][1:], (int(v) for v in lines[1][1:])))
        out.update(listen_overflows=ext.get("ListenOverflows"), listen_drops=ext.get("ListenDrops"))
    return out


def throttling(pid):
    """The process's cgroup (v2) cpu.stat: nr_throttled, throttled_usec."""
    for line in (read("/proc/%d/cgroup" % pid) or "").splitlines():
        if line.startswith("0::"):
            text = read("/sys/fs/cgroup%s/cpu.stat" % line[3:].strip()) or ""
            stat = dict((k, int(v)) for k, v in (ln.split() for ln in text.splitlines() if len(ln.split()) == 2))
            return {"nr_throttled": stat.get("nr_throttled"), "throttled_usec": stat.get("throttled_usec")}
    return {}


COUNTERS = ("listen_overflows", "listen_drops", "nr_throttled", "throttled_usec")


def main(pid, seconds, cpu=None):
    last, last_t = cpu_ticks(pid), time.time()
    last_core = core_ticks(cpu) if cpu is not None else None
    last_counters = dict(netns(pid), **throttling(pid)) if cpu is not None else {}
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(max(0.0, 1.0 - (time.time() - last_t)))
        now, t = cpu_ticks(pid), time.time()
        tw, fw, total = sockets(pid)
        used = None if now is None or last is None else round(100.0 * (now - last) / TICK / (t - last_t), 1)
        fds, threads = files_and_threads(pid)
        row = {"t": round(t, 3), "cpu_pct": used, "conntrack": conntrack(), "time_wait": tw, "fin_wait": fw,
               "sockets": total, "fds": fds, "threads": threads}
        if cpu is not None:
            core = core_ticks(cpu)
            spent = sum(core.values()) - sum(last_core.values())
            row["core"] = dict((m, round(100.0 * (core[m] - last_core[m]) / max(1, spent), 1)) for m in CPU_MODES)
            counters = dict(netns(pid), **throttling(pid))
            row.update((k, v) for k, v in counters.items() if k not in COUNTERS)
            row.update((k, None if counters.get(k) is None or last_counters.get(k) is None
                        else counters[k] - last_counters[k]) for k in COUNTERS)
            last_core, last_counters = core, counters
        print(json.dumps(row), flush=True)
        last, last_t = now, t


if __name__ == "__main__":
    args = sys.argv[1:]
    core_arg = int(args[args.index("--cpu") + 1]) if "--cpu" in args else None
    main(int(args[0]), float(args[1]), core_arg)
