#!/usr/bin/env python
"""homelab.edge keeper: re-apply the k3d load balancer UDP fix whenever a
load balancer starts (k3d recreates it from its image on `cluster edit` and
port changes, which loses the template patch).

Watches Docker events for containers labelled k3d.role=loadbalancer and
applies the same code the homelab.edge.k3d_serverlb module uses
(k3d_serverlb.py beside this file). Installed by the homelab.edge.k3d_serverlb
role, as a systemd unit or, without systemd, as a daemon process:

  k3d-serverlb-keeper.py --config FILE            run in the foreground
  k3d-serverlb-keeper.py --config FILE --daemon   start unless running
  k3d-serverlb-keeper.py --config FILE --restart  stop, then start
  k3d-serverlb-keeper.py --config FILE --stop
"""

import argparse
import json
import os
import signal
import sys
import time

PIDFILE = LOGFILE = None  # one keeper per configuration file, see paths()


def _lib():
    """The module's library, installed beside this file by the role."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import k3d_serverlb
    return k3d_serverlb


def options(cfg):
    """The fix's options from the configuration file the role writes."""
    return dict((k, cfg[k]) for k in _lib().DEFAULTS)


def paths(config):
    """Pid and log file of the keeper for one configuration file."""
    global PIDFILE, LOGFILE
    tag = os.path.splitext(os.path.basename(config))[0]
    PIDFILE = "/run/homelab-edge-%s-keeper.pid" % tag
    LOGFILE = "/var/log/homelab-edge-%s-keeper.log" % tag


def log(msg):
    sys.stderr.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), msg))
    sys.stderr.flush()


def wanted(container, cfg):
    lb = _lib()
    if lb.is_renamed_leftover(container.name):
        return False
    if cfg.get("names"):
        return container.name in cfg["names"]
    return not cfg.get("clusters") or container.labels.get("k3d.cluster") in cfg["clusters"]


def fix(container, cfg, attempts=6):
    """A load balancer that just started is still rendering its first config:
    retry for up to a minute."""
    lb = _lib()
    want = options(cfg)
    for i in range(attempts):
        try:
            res = lb.apply(container, want, timeout=cfg.get("timeout", 30))
            log("%s: %s" % (container.name, "fixed" if res["changed"] else "already fixed"))
            return True
        except (lb.ApplyError, lb.ShapeError) as e:
            log("%s: attempt %d: %s" % (container.name, i + 1, str(e).splitlines()[0]))
        except Exception as e:  # the container may be going away
            log("%s: attempt %d: %s: %s" % (container.name, i + 1, type(e).__name__, e))
        time.sleep(5)
    return False


def run(cfg):
    import docker
    while True:
        try:
            client = docker.from_env()
            since = int(time.time())
            for c in client.containers.list(filters={"label": "k3d.role=loadbalancer"}):
                if wanted(c, cfg):
                    fix(c, cfg)
            events = client.events(decode=True, since=since, filters={
                "type": "container", "event": "start", "label": "k3d.role=loadbalancer"})
            for ev in events:
                try:
                    c = client.containers.get(ev["id"])
                except docker.errors.NotFound:
                    continue
                if wanted(c, cfg):
                    log("%s started" % c.name)
                    fix(c, cfg)
        except Exception as e:  # engine restarted or unreachable: reconnect
            log("docker: %s: %s; reconnecting in 5 s" % (type(e).__name__, e))
            time.sleep(5)


def running_pid():
    try:
        pid = int(open(PIDFILE).read().strip())
        os.kill(pid, 0)
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"k3d-serverlb-keeper" not in f.read():
                return None
        return pid
    except (OSError, ValueError):
        return None


def stop():
    pid = running_pid()
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    for dummy in range(50):
        if running_pid() != pid:
            break
        time.sleep(0.1)
    return True


def daemonize(cfg):
    if running_pid():
        print("running")
        return
    if os.fork():
        for dummy in range(50):  # until the child has written its pidfile
            if running_pid():
                print("started")
                return
            time.sleep(0.1)
        sys.exit("keeper did not start; see %s" % LOGFILE)
    os.setsid()
    if os.fork():
        os._exit(0)
    fd = os.open(LOGFILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.dup2(os.open(os.devnull, os.O_RDWR), 0)
    os.dup2(fd, 1)
    with open(PIDFILE, "w") as f:
        f.write(str(os.getpid()))
    run(cfg)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="/etc/homelab-edge/k3d-serverlb.json")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--daemon", action="store_true")
    g.add_argument("--restart", action="store_true")
    g.add_argument("--stop", action="store_true")
    a = ap.parse_args()
    paths(a.config)
    if a.stop:
        print("stopped" if stop() else "not running")
        return
    with open(a.config) as f:
        cfg = json.load(f)
    problems = _lib().validate_options(**options(cfg))
    if problems:
        sys.exit("; ".join(problems))
    if a.restart:
        stop()
        daemonize(cfg)
    elif a.daemon:
        daemonize(cfg)
    else:
        run(cfg)


if __name__ == "__main__":
    main()
