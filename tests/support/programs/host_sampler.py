#!/usr/bin/env python3
"""On a lab host (the NAS), once a second for SECONDS seconds: the CPU a
process uses (Traefik's, % of one core), the host's conntrack entries, and
the TCP sockets in TIME_WAIT and FIN_WAIT in that process's network
namespace. One JSON line per second.

  host_sampler.py PID SECONDS
"""
import json
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


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


def main(pid, seconds):
    last, last_t = cpu_ticks(pid), time.time()
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(max(0.0, 1.0 - (time.time() - last_t)))
        now, t = cpu_ticks(pid), time.time()
        tw, fw, total = sockets(pid)
        cpu = None if now is None or last is None else round(100.0 * (now - last) / TICK / (t - last_t), 1)
        print(json.dumps({"t": round(t, 3), "cpu_pct": cpu, "conntrack": conntrack(), "time_wait": tw,
                          "fin_wait": fw, "sockets": total}), flush=True)
        last, last_t = now, t


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
