#!/usr/bin/env python
"""homelab.edge keeper: keep the k3d load balancer fix in place through
everything k3d does, without anyone running Ansible.

Watches Docker's events for k3d load balancers (label k3d.role=loadbalancer)
and uses the same code as the homelab.edge.k3d_serverlb module
(module_utils/k3d_serverlb/, beside this file):

  create          k3d made a new load balancer from its image (cluster create,
                  cluster edit, port changes): patch its template before its
                  first render, so nginx never starts without the fix.
  start           apply the fix and wait until nginx runs it (restarts, engine
                  restarts, a create the keeper did not see in time).
  extract-to-dir  k3d copied a new values.yaml in (servers added or removed).
                  The template keeps the fix whatever k3d writes; but confd's
                  watch can miss k3d's copy (Docker replaces the file by remove
                  then create), so render again when nginx.conf is stale.

Installed by the homelab.edge.k3d_serverlb role, as a systemd unit or,
without systemd, as a daemon process:

  k3d-serverlb-keeper.py --config FILE            run in the foreground
  k3d-serverlb-keeper.py --config FILE --daemon   start unless running
  k3d-serverlb-keeper.py --config FILE --restart  stop, then start
  k3d-serverlb-keeper.py --config FILE --stop
  k3d-serverlb-keeper.py --config FILE --metrics-once

With metrics_dir in its configuration it also writes, every metrics_interval
seconds, node_exporter textfile metrics of every load balancer (its state,
connections, UDP sessions, "not enough" lines): homelab_edge_k3d.prom.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

# the module's library: the k3d_serverlb package of plugins/module_utils (and the one file it imports from
# there), installed by the role in module_utils/ beside this file: see load_library()
k3d_fix = k3d_container = k3d_template = k3d_signals = k3d_metrics = None

EVENTS = ["create", "start", "extract-to-dir"]
ATTEMPTS = 6


def load_library():
    """Import the library as the package `module_utils` (the collection's plugins/module_utils, as far as the
    role ships it): its files import each other relatively, so they need no collection on the host."""
    global k3d_fix, k3d_container, k3d_template, k3d_signals, k3d_metrics
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from module_utils.k3d_serverlb import container, fix, metrics, signals, template
    k3d_fix, k3d_container, k3d_template, k3d_signals, k3d_metrics = fix, container, template, signals, metrics


def log(msg):
    sys.stderr.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), msg))
    sys.stderr.flush()


class Keeper(object):
    def __init__(self, cfg, path="the configuration"):
        missing = [k for k in k3d_fix.DEFAULTS if k not in cfg]
        if missing:
            raise SystemExit("%s lacks %s: it is written by the homelab.edge.k3d_serverlb role (run it again), and "
                             "names every option of the fix" % (path, ", ".join(missing)))
        problems = k3d_fix.validate_options(**dict((k, cfg[k]) for k in k3d_fix.DEFAULTS))
        if problems:
            raise SystemExit("%s: %s" % (path, "; ".join(problems)))
        self.names = cfg.get("names") or []
        self.clusters = cfg.get("clusters") or []
        self.want = dict((k, cfg[k]) for k in k3d_fix.DEFAULTS)
        self.render_timeout = cfg.get("render_timeout", k3d_fix.RENDER_TIMEOUT)
        self.metrics_dir = cfg.get("metrics_dir") or ""
        self.metrics_interval = max(5, int(cfg.get("metrics_interval") or 30))
        # the counts continue those of the textfile an earlier keeper wrote; a key seen for the first time goes
        # out at 0, its lines held for the next write; each load balancer's log is read from where its last
        # successful read ended (since the keeper started, for one not read yet)
        self.not_enough, self.held, self.read_until = {}, {}, {}
        if self.metrics_dir:
            try:
                with open(os.path.join(self.metrics_dir, k3d_metrics.FILE)) as f:
                    self.not_enough = k3d_metrics.read_totals(f.read())
            except (IOError, OSError):
                pass
        self.metrics_since = time.time()

    def fix(self, container):
        """handle() until the load balancer is fixed: one that just started
        may still be rendering its first config or waiting for nginx."""
        for attempt in range(1, ATTEMPTS + 1):
            entry = k3d_fix.handle(container, container.name, bool(self.names), self.want,
                                   render_timeout=self.render_timeout)
            if not entry["failed"]:
                log("%s: %s%s%s" % (container.name, entry["state_text"],
                                    (" now: " + "; ".join(entry["reasons"])) if entry["changed"] else " already",
                                    ("; UDP profiles: " + entry["udp_profiles_text"]) if entry.get("udp_profiles_text")
                                    else ""))
                for warning in entry.get("warnings", []):
                    log(warning)
                return True
            log("%s: attempt %d: %s" % (container.name, attempt, entry["msg"].splitlines()[0]))
            time.sleep(5)
        return False

    def on_create(self, container):
        try:
            if k3d_fix.patch_created(container, self.want):
                log("%s: created; template patched before its first render" % container.name)
        except (k3d_template.ShapeError, k3d_container.ApplyError) as e:
            log("%s: created; template not patched: %s" % (container.name, e))
        except Exception as e:  # deliberate: it may already be gone; the start event applies in full
            log("%s: created; template not patched: %s: %s" % (container.name, type(e).__name__, e))

    def on_values(self, container):
        time.sleep(1)  # confd's own watch first
        try:
            if k3d_fix.render_is_stale(container):
                k3d_container.render(container, self.render_timeout)
                log("%s: k3d's values.yaml was not rendered by confd's watch; rendered" % container.name)
        except (k3d_template.ShapeError, k3d_container.ApplyError) as e:
            log("%s: checking the render after k3d's values.yaml: %s" % (container.name, e))
        except Exception as e:  # deliberate: the container may be going away
            log("%s: checking the render: %s: %s" % (container.name, type(e).__name__, e))

    def react(self, client, event, not_found):
        cid, action = k3d_container.event_of(event)
        if not cid or not action:
            log("an event the keeper cannot read (no container ID or action): %s" % json.dumps(event)[:200])
            return
        try:
            container = client.containers.get(cid)
        except not_found:
            return
        if not k3d_container.wanted(container, self.names, self.clusters):
            return
        if action == "create":
            self.on_create(container)  # at once: k3d starts it a moment later
        elif action == "start":
            log("%s started" % container.name)
            threading.Thread(target=self.fix, args=(container,), daemon=True).start()
        elif action == "extract-to-dir" and container.status == "running":
            threading.Thread(target=self.on_values, args=(container,), daemon=True).start()

    def write_metrics(self, client, not_found):
        """One pass: every load balancer's signals (no DNS probe) into the
        textfile, atomically (node_exporter never reads half a file)."""
        now = time.time()
        entries = []
        for name, container, dummy in k3d_container.find_load_balancers(client, self.names, self.clusters,
                                                                        not_found=not_found):
            if container is None or container.status != "running":
                continue
            try:
                entry = k3d_signals.signals(container, self.want, self.read_until.get(name, self.metrics_since),
                                            until=now)
            except Exception as e:  # deliberate: one load balancer going away must not stop the metrics
                log("%s: metrics: %s: %s" % (name, type(e).__name__, e))
                continue
            self.read_until[name] = now
            k3d_metrics.add_not_enough(self.not_enough, entry, self.held)
            entries.append(entry)
        os.makedirs(self.metrics_dir, exist_ok=True)
        path = os.path.join(self.metrics_dir, k3d_metrics.FILE)
        with open(path + ".tmp", "w") as f:
            f.write(k3d_metrics.text(entries, self.not_enough, int(now)))
        os.chmod(path + ".tmp", 0o644)
        os.rename(path + ".tmp", path)

    def metrics_loop(self):
        import docker
        while True:
            try:
                self.write_metrics(docker.from_env(), docker.errors.NotFound)
            except Exception as e:  # deliberate: the engine restarting; try again next interval
                log("metrics: %s: %s" % (type(e).__name__, e))
            time.sleep(self.metrics_interval)

    def run(self):
        import docker
        if self.metrics_dir:
            threading.Thread(target=self.metrics_loop, daemon=True).start()
        while True:
            try:
                client = docker.from_env()
                since = int(time.time())
                for name, container, dummy in k3d_container.find_load_balancers(
                        client, self.names, self.clusters, not_found=docker.errors.NotFound):
                    if container is not None and container.status == "running":
                        self.fix(container)
                events = client.events(decode=True, since=since, filters={
                    "type": "container", "event": EVENTS,
                    "label": "%s=%s" % (k3d_container.ROLE_LABEL, k3d_container.ROLE_LOADBALANCER)})
                for event in events:
                    self.react(client, event, docker.errors.NotFound)
            except Exception as e:  # deliberate: engine restarted or unreachable: reconnect
                log("docker: %s: %s; reconnecting in 5 s" % (type(e).__name__, e))
                time.sleep(5)


# ------------------------------------------------------- process management

def paths(config):
    """Pid and log file of the keeper for one configuration file."""
    tag = os.path.splitext(os.path.basename(config))[0]
    return "/run/homelab-edge-%s-keeper.pid" % tag, "/var/log/homelab-edge-%s-keeper.log" % tag


def running_pid(pidfile):
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"k3d-serverlb-keeper" not in f.read():
                return None
        return pid
    except (OSError, ValueError):
        return None


def stop(pidfile):
    pid = running_pid(pidfile)
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    for dummy in range(50):
        if running_pid(pidfile) != pid:
            break
        time.sleep(0.1)
    return True


def daemonize(keeper, pidfile, logfile):
    if running_pid(pidfile):
        print("running")
        return
    if os.fork():
        for dummy in range(50):  # until the child has written its pidfile
            if running_pid(pidfile):
                print("started")
                return
            time.sleep(0.1)
        sys.exit("keeper did not start; see %s" % logfile)
    os.setsid()
    if os.fork():
        os._exit(0)
    fd = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.dup2(os.open(os.devnull, os.O_RDWR), 0)
    os.dup2(fd, 1)
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    keeper.run()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="default: the library's KEEPER_CONFIG, where the role writes it")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--daemon", action="store_true")
    g.add_argument("--restart", action="store_true")
    g.add_argument("--stop", action="store_true")
    g.add_argument("--metrics-once", action="store_true",
                   help="write the metrics once (log window: the last 60 s) and exit; fixes nothing")
    a = ap.parse_args()
    if not a.config:
        load_library()
        a.config = k3d_fix.KEEPER_CONFIG
    pidfile, logfile = paths(a.config)
    if a.stop:
        print("stopped" if stop(pidfile) else "not running")
        return
    load_library()
    with open(a.config) as f:
        cfg = json.load(f)
    keeper = Keeper(cfg, a.config)  # refuses a file with missing or bad options, saying which
    if a.metrics_once:
        import docker
        if not keeper.metrics_dir:
            sys.exit("%s sets no metrics_dir" % a.config)
        keeper.metrics_since = int(time.time()) - 60
        keeper.write_metrics(docker.from_env(), docker.errors.NotFound)
        return
    if a.restart:
        stop(pidfile)
    if a.restart or a.daemon:
        daemonize(keeper, pidfile, logfile)
    else:
        keeper.run()


if __name__ == "__main__":
    main()
