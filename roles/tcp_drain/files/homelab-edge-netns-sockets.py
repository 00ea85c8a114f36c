#!/usr/bin/env python
"""homelab.edge: the TCP counters of containers' own network namespaces, for
node_exporter's textfile collector (node_exporter on the host reads only the
host's: TIME_WAIT, orphans, accepts and listen overflows are per namespace).

  homelab-edge-netns-sockets.py --dir DIR CONTAINER...

One pass: each container's PID from the docker CLI, its namespace's counters
from /proc/PID/net/{sockstat,snmp,netstat}, written atomically to
DIR/homelab_edge_netns.prom (node_exporter never reads half a file). A
container that is not running, or whose files cannot be read, goes out as
homelab_edge_netns_up 0. Installed by the homelab.edge.tcp_drain role with a
systemd timer (tcp_drain_metrics_interval); the parsing is
netns_sockets.py, installed beside this file.
"""

import argparse
import os
import subprocess
import sys
import time


def pids(containers):
    """{container: PID of its running process, or None}."""
    out = dict((c, None) for c in containers)
    # one call for all; a missing container makes docker exit 1 after it printed the others
    res = subprocess.run(["docker", "inspect", "-f", "{{.Name}} {{.State.Running}} {{.State.Pid}}"] + list(containers),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=30,
                         check=False)
    for line in res.stdout.splitlines():
        name, running, pid = (line.split() + ["", "", ""])[:3]
        if name.lstrip("/") in out and running == "true" and pid.isdigit() and int(pid) > 0:
            out[name.lstrip("/")] = int(pid)
    return out


def read(netns_sockets, pid):
    texts = {}
    for name in netns_sockets.FILES:
        with open("/proc/%d/net/%s" % (pid, name)) as f:
            texts[name] = f.read()
    return netns_sockets.sample(texts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--dir", required=True, help="node_exporter's textfile directory")
    p.add_argument("containers", nargs="+")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import netns_sockets
    samples = {}
    for container, pid in pids(args.containers).items():
        try:
            samples[container] = read(netns_sockets, pid) if pid else None
        except (OSError, ValueError) as e:  # the container ended between inspect and read
            print("%s: %s" % (container, e), file=sys.stderr)
            samples[container] = None
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, netns_sockets.FILE)
    with open(path + ".tmp", "w") as f:
        f.write(netns_sockets.text(samples, int(time.time())))
    os.chmod(path + ".tmp", 0o644)
    os.rename(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
