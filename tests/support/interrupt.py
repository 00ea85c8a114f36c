#!/usr/bin/env python
"""The interruption harness (issue 62): `site.yml` per group (nas, vps) on lab hosts with and without systemd,
the controller killed at the start of every task that follows a change (the test-only callback
tests/support/callback_plugins/homelab_edge_interrupt.py: SIGKILL of ansible-playbook's process group, as a
closed laptop), in the apply and in the undo.

A lane is one group on its two hosts (one booted by systemd, one not), run by one ansible-playbook at a time.
A boundary is the start of the task right after one that changed a host in a recorded run: only those states differ
from the one before; tasks that change nothing (reads, plans, checks) are not tried. On the VPS the way in (a new
SSH login on the user's port, the tunnel's UDP port) is checked after every kill and every run.

  baseline  from the user's host: apply (recorded: every task start and what it changed on each host) -> the
            service answers -> apply again: nothing changed -> undo (recorded) -> undo again: nothing changed ->
            every file of the user's back byte for byte, nothing of ours left (files, units, containers, live values)
  chains    (the default) then, from the user's host, a run killed at each apply boundary in turn, each resuming the
            one before it (it must reach the next boundary without a failure) -> apply: rc 0, the service answers ->
            apply: nothing changed -> a run killed at each undo boundary in turn -> undo: rc 0 -> files back byte
            for byte, nothing of ours left. A boundary a resumed run does not reach (its task list differs from the
            recorded one's) is tried as in pairs. In its place in the apply chain, each task of a lane's in_flight
            (the NAS: traefik_inflight's change of the user's Traefik) is cut off while it runs, halfway through its
            recorded duration, and the role's own run must then end rc 0.
  pairs     then one cycle from the user's host per boundary: apply killed at the k-th apply boundary -> apply ->
            apply: nothing changed -> undo killed at the k-th undo boundary -> undo -> compare; max(apply, undo)
            cycles. Every kill is followed by a whole run from it.

  python tests/support/interrupt.py [nas] [vps] [--mode chains|pairs|baseline] [--rules] [--keep]

--rules: the NAS roles write their Prometheus rules files too (three more boundaries in the apply and three in the
undo: one file write and one removal per role; left out of `tests/run.sh interrupt` for time). --keep leaves the
hosts up. Every run's output and record is kept in
tests/output/interrupt/<lane>/; the lane's result in tests/output/interrupt/<lane>/result.json."""
import argparse
import concurrent.futures
import glob
import itertools
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lab"))
import edge  # noqa: E402
import hosts  # noqa: E402
import upstream_images  # noqa: E402

OUT = os.path.join(ROOT, "tests", "output", "interrupt")
CALLBACKS = os.path.join(ROOT, "tests", "support", "callback_plugins")
NETWORK = "homelab-interrupt"
BACKEND = "hle-int-backend"
RUN_TIMEOUT = 600
# the whole lane (host creation aside): well above what it takes, so that a lane that hangs ends
LANE_BUDGET = 1800
# the VPS's confirmation window here: the change and its new login fit in it on a loaded 2-core machine,
# and a run cut off inside it waits for it (roles/vps_connlimit/tasks/pending.yml)
CONFIRM_TIMEOUT = 30
SSHD_PORT, UDP_PORT = 2222, 51820
SITE = "site.nas.lab"


# ----------------------------------------------------------------- pure logic (tests/dev/test_interrupt.py)
def parse_record(lines):
    """The callback's JSON lines -> {"starts": [{"n", "task", "occurrence"}], "results": {N: {host: status}},
    "stats": {host: {...}} or None (the run did not end), "killed": {"n", "task", "occurrence"} or None}."""
    out = {"starts": [], "results": {}, "stats": None, "killed": None}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        e = json.loads(line)
        if "start" in e:
            out["starts"].append({"n": e["start"], "task": e["task"], "occurrence": e["occurrence"], "t": e.get("t")})
        elif "killed" in e:
            out["killed"] = {"n": e["killed"], "task": e["task"], "occurrence": e["occurrence"], "t": e.get("t")}
        elif "task" in e:
            out["results"].setdefault(e["task"], {})[e["host"]] = e["status"]
        elif "stats" in e:
            out["stats"] = e["stats"]
    return out


def boundaries(record):
    """[{"n", "task", "occurrence", "after"}]: the start of each task that follows a task that changed some host,
    named by the task and how many times it had started (the run is ended there, whatever its number: a run that
    resumes a cut-off one may start other tasks before it), and the task that changed. A change by the last task has
    no boundary after it: the run ends there."""
    starts = record["starts"]
    return [dict([(k, nxt[k]) for k in ("n", "task", "occurrence")], after=cur["task"])
            for cur, nxt in zip(starts, starts[1:]) if "changed" in record["results"].get(cur["n"], {}).values()]


def duration(record, task):
    """Seconds from the start of `task` (its first) to the start of the next task, in a recorded run (None when
    either is missing)."""
    starts = record["starts"]
    for cur, nxt in zip(starts, starts[1:]):
        if cur["task"] == task and cur.get("t") and nxt.get("t"):
            return nxt["t"] - cur["t"]
    return None


def describe(b):
    return "%s%s (after %s)" % (b["task"], " #%d" % b["occurrence"] if b["occurrence"] > 1 else "", b["after"])


def cycles(apply_bounds, undo_bounds):
    """Pairs (apply boundary or None, undo boundary or None): one of each per cycle, every boundary once."""
    return list(itertools.zip_longest(apply_bounds, undo_bounds))


def failed_before_kill(record):
    """[(task, host)] that failed (not ignored) in a run that was killed later."""
    names = dict((s["n"], s["task"]) for s in record["starts"])
    return [(names.get(n, n), h) for n, hosts_ in sorted(record["results"].items())
            for h, status in sorted(hosts_.items()) if status in ("failed", "unreachable")]


def changed_hosts(record):
    """{host: number of changed tasks} from the run's stats; None when the run did not end (killed)."""
    if record["stats"] is None:
        return None
    return dict((h, s.get("changed", 0)) for h, s in record["stats"].items())


def failed_hosts(record):
    if record["stats"] is None:
        return None
    return sorted(h for h, s in record["stats"].items() if s.get("failures") or s.get("unreachable"))


def compare(before, after, kept=()):
    """What differs between two snapshots of a host ({key: value}; a key is a path or a named live value):
    {"changed": [...], "added": [...], "removed": [...], "kept": [(key, why)]}. A difference whose key matches a
    pattern of `kept` ([(regex, why)]) is the role's documented undo (kept by design), listed apart."""
    out = {"changed": [], "added": [], "removed": [], "kept": []}
    for key in sorted(set(before) | set(after)):
        if before.get(key) == after.get(key):
            continue
        why = next((w for pattern, w in kept if re.match(pattern + r"\Z", key)), None)
        if why:
            out["kept"].append((key, why))
        elif key not in before:
            out["added"].append(key)
        elif key not in after:
            out["removed"].append(key)
        else:
            out["changed"].append(key)
    return out


def problems_of(diff, before=None, after=None):
    """A comparison's differences as sentences ([] when the undo left the host as it was); with the snapshots,
    what a changed key held before and holds now (a file's mode and digest, a live value)."""
    words = {"changed": "not back as it was", "added": "left behind", "removed": "gone"}

    def show(key):
        if before is None or key not in before or key not in after:
            return key
        a, b = before[key], after[key]
        try:  # a live value kept as JSON: only what differs in it
            a, b = json.loads(a), json.loads(b)
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            a, b = dict((k, a.get(k)) for k in keys), dict((k, b.get(k)) for k in keys)
        except (TypeError, ValueError, AttributeError):
            pass
        return "%s (%s -> %s)" % (key, " ".join(str(a).split())[:400], " ".join(str(b).split())[:400])
    return ["%s: %s" % (words[k], ", ".join(show(key) for key in diff[k])) for k in ("changed", "added", "removed")
            if diff[k]]


# ------------------------------------------------------------------------------------------------ the hosts
# A host's state as the undo must leave it: every file (content and mode), link and directory under these roots,
# the engine's containers, networks and volumes, the user's Traefik as Docker runs it, systemd's units, the live
# values the drain role sets (on the host and in the Traefik's namespace), and the live firewall.
SNAPSHOT = r"""
import hashlib, json, os, stat, subprocess, sys
ROOTS = ["/etc", "/srv", "/opt", "/usr/local", "/var/lib/homelab-edge", "/var/lib/prometheus"]
# what changes on a host by itself, whatever runs there
SKIP = ("/etc/ssh/ssh_host_", "/etc/resolv.conf", "/etc/hosts", "/etc/hostname", "/etc/mtab", "/etc/ld.so.cache",
        "/etc/docker/key.json", "/usr/local/lib/python3", "/etc/machine-id", "/etc/.pwd.lock", "/etc/ufw/.")
out = {}
def run(*argv):
    p = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    return p.stdout if p.returncode == 0 else None
for root in ROOTS:
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.join(base, d).startswith(SKIP)]
        for name in dirs + files:
            path = os.path.join(base, name)
            if path.startswith(SKIP):
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[path] = "link -> " + os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                out[path] = "dir %o" % stat.S_IMODE(st.st_mode)
            else:
                with open(path, "rb") as f:
                    out[path] = "file %o %s" % (stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest()[:16])
keys = ["net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_abort_on_overflow"]
out["sysctl:host"] = run("sysctl", "-n", *keys)
if os.path.exists("/run/systemd/system"):
    for l in (run("systemctl", "list-unit-files", "--no-legend", "--no-pager") or "").splitlines():
        if len(l.split()) >= 2:
            out["unit file " + l.split()[0]] = l.split()[1]
    # the units systemd has loaded (a unit whose file is gone stays loaded until a daemon-reload)
    for l in (run("systemctl", "list-units", "--all", "--no-legend", "--no-pager", "--plain") or "").splitlines():
        # not the units of a login, nor the mounts and scopes of the engine's containers
        if l.split() and not l.split()[0].startswith(("session-", "user@", "user-runtime-dir@", "run-", "docker-",
                                                      "var-lib-docker", "var-lib-containerd")):
            out["unit " + l.split()[0]] = " ".join(l.split()[1:2])
if run("docker", "info", "-f", "{{.ID}}") is not None:
    for l in (run("docker", "ps", "-a", "--format", "{{.Names}} {{.Image}}") or "").splitlines():
        out["container " + l.split()[0]] = " ".join(l.split()[1:])
    for l in (run("docker", "network", "ls", "--format", "{{.Name}}") or "").split():
        out["network " + l] = "present"
    for l in (run("docker", "volume", "ls", "-q") or "").split():
        out["volume " + l] = "present"
    inspect = run("docker", "inspect", "traefik")
    if inspect:
        c = json.loads(inspect)[0]
        # compose marks a container it re-created (com.docker.compose.replace), whoever asked it to
        labels = dict((k, v) for k, v in (c["Config"].get("Labels") or {}).items() if k != "com.docker.compose.replace")
        out["docker:traefik"] = json.dumps({"healthcheck": c["Config"].get("Healthcheck"), "labels": labels,
                                            "env": c["Config"].get("Env"), "cmd": c["Config"].get("Cmd"),
                                            "sysctls": c["HostConfig"].get("Sysctls"),
                                            "mounts": sorted("%s:%s" % (m["Source"], m["Destination"]) for m in c["Mounts"])},
                                           sort_keys=True)
        if c["State"].get("Pid"):
            out["sysctl:traefik"] = run("nsenter", "-t", str(c["State"]["Pid"]), "-n", "sysctl", "-n", *keys)
if run("iptables", "-w", "-S") is not None:
    out["firewall:iptables"] = run("iptables", "-w", "-S")
    out["firewall:ip6tables"] = run("ip6tables", "-w", "-S")
print(json.dumps(out))
"""


def snapshot(container):
    p = subprocess.run(["docker", "exec", "-i", container, "python3", "-"], input=SNAPSHOT, capture_output=True,
                       text=True, timeout=120, check=False)
    if p.returncode:
        raise RuntimeError("snapshot of %s: %s" % (container, p.stderr[-2000:]))
    return json.loads(p.stdout)


def address(container):
    return hosts.address(container, NETWORK)


def https_status(ip, name=SITE, port=443, path="/", timeout=3.0):
    """The status of GET https://name:port/path at ip (a self-signed certificate), or None."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((ip, port), timeout=timeout) as s:
            with ctx.wrap_socket(s, server_hostname=name) as t:
                t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, name)).encode())
                head = t.recv(4096).decode("latin-1")
    except (OSError, ssl.SSLError):
        return None
    m = re.match(r"HTTP/1\.[01] (\d{3})", head)
    return int(m.group(1)) if m else None


def http_status(ip, port=80, timeout=3.0):
    try:
        with socket.create_connection((ip, port), timeout=timeout) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: vps\r\nConnection: close\r\n\r\n")
            head = s.recv(4096).decode("latin-1")
    except OSError:
        return None
    m = re.match(r"HTTP/1\.[01] (\d{3})", head)
    return int(m.group(1)) if m else None


def new_ssh_login(ip, port=SSHD_PORT):
    """A NEW SSH login (no shared master connection) on the user's port, from outside the host."""
    p = subprocess.run(["ssh", "-i", hosts.key(), "-p", str(port), "-o", "ControlMaster=no", "-o", "ControlPath=none",
                        *hosts.SSH_OPTIONS, "%s@%s" % (hosts.USER, ip), "true"],
                       capture_output=True, text=True, timeout=30, check=False)
    return p.returncode == 0


def udp_answers(ip, port=UDP_PORT, timeout=2.0):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(b"ping", (ip, port))
            return s.recvfrom(2048)[0].startswith(b"wg-standin")
        except OSError:
            return False


def within(seconds, test, interval=0.5):
    """Whether test() holds within `seconds` (checked at once, then every `interval`)."""
    deadline = time.time() + seconds
    while True:
        if test():
            return True
        if time.time() > deadline:
            return False
        time.sleep(interval)


# The UDP service standing in for the tunnel's WireGuard (answers every datagram), as molecule/vps_connlimit has it
UDP_STANDIN = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('0.0.0.0', %d))\n"
               "while True:\n    d, a = s.recvfrom(2048)\n    s.sendto(b'wg-standin ' + d, a)\n" % UDP_PORT)


class Lane(object):
    """One group of the site on its two hosts. Subclasses say how the hosts are made and what answering means."""
    name = tags = None
    hosts = {}  # inventory name -> (container, ssh port, systemd)
    absent = {}
    kept = ()  # [(regex over a snapshot key, why: the role's documented undo)]
    in_flight = ()  # tasks also cut off while they run, halfway through their recorded duration (chains only)

    def __init__(self, skip_tags=(), rules=False):
        self.skip_tags = list(skip_tags)
        self.rules = rules
        self.dir = os.path.join(OUT, self.name)
        self.seq = 0
        self.log = []
        self.failures = []
        self.reached = []  # [(state, boundary)] each run was killed at

    # ---- hosts
    def up(self):
        raise NotImplementedError

    def down(self):
        hosts.down(*[c for c, port, sd in self.hosts.values()])

    def host_vars(self, name):
        return {}

    def group_vars(self):
        return {}

    def write_inventory(self):
        inv = {"all": {"children": {self.name: {"hosts": {}, "vars": self.group_vars()}}}}
        for name, (container, port, systemd) in sorted(self.hosts.items()):
            inv["all"]["children"][self.name]["hosts"][name] = dict(hosts.inventory_vars(port), **self.host_vars(name))
        self.inventory = os.path.join(self.dir, "inventory.json")
        with open(self.inventory, "w") as f:
            json.dump(inv, f, indent=1)
        # the inventory plugin of the YAML kind reads JSON too; the name must end in .yml for it
        os.rename(self.inventory, self.inventory[:-5] + ".yml")
        self.inventory = self.inventory[:-5] + ".yml"

    # ---- what must hold
    def service(self):
        """Problems with what the user runs (empty: it answers)."""
        return []

    def way_in(self):
        """Problems with the way in (empty: a new login and the tunnel's port get through)."""
        return []

    def snapshots(self):
        return dict((name, snapshot(c)) for name, (c, port, sd) in self.hosts.items())

    def kept_for(self, host):
        return [(p, w) for p, w, only in self.kept if only is None or only == host]

    # ---- runs
    def note(self, text):
        line = "%s [%s] %s" % (time.strftime("%H:%M:%S"), self.name, text)
        print(line, flush=True)
        self.log.append(line)

    def fail(self, text):
        self.note("FAILED: " + text)
        self.failures.append(text)

    def run(self, label, state, kill=None, delay=0, tags=None):
        """One ansible-playbook of site.yml on the lane; kill: a boundary (boundaries()) to end it at.
        Returns (rc, record, seconds)."""
        self.seq += 1
        base = os.path.join(self.dir, "%02d-%s" % (self.seq, label))
        record_path, control = base + ".jsonl", tempfile.mkdtemp(prefix="hle-int-cp-")
        env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, ANSIBLE_CALLBACKS_ENABLED="homelab_edge_interrupt",
                   HOMELAB_EDGE_INTERRUPT_RECORD=record_path, ANSIBLE_SSH_CONTROL_PATH_DIR=control,
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
                   # fewer SSH round trips per task (the kills come between tasks, where nothing runs on the hosts).
                   # Not for a cut in flight: without it the module runs on a terminal, which a lost connection hangs
                   # up, as Ansible runs it by default
                   ANSIBLE_PIPELINING="0" if delay else "1")
        for k in ("HOMELAB_EDGE_INTERRUPT_TASK", "HOMELAB_EDGE_INTERRUPT_OCCURRENCE", "HOMELAB_EDGE_INTERRUPT_DELAY"):
            env.pop(k, None)
        if kill:
            env["HOMELAB_EDGE_INTERRUPT_TASK"] = kill["task"]
            env["HOMELAB_EDGE_INTERRUPT_OCCURRENCE"] = str(kill["occurrence"])
            env["HOMELAB_EDGE_INTERRUPT_DELAY"] = str(delay)
        argv = ["ansible-playbook", "-i", self.inventory, os.path.join(ROOT, "site.yml"), "--tags", tags or self.tags]
        argv += ["--skip-tags", ",".join(self.skip_tags)] if self.skip_tags else []
        argv += ["-e", json.dumps(self.absent)] if state == "absent" else []
        t0 = time.time()
        with open(base + ".log", "w") as log:
            p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
                log.write("\n[interrupt harness] killed after %d s\n" % RUN_TIMEOUT)
        # the closed laptop's SSH connections go with it
        for sock in glob.glob(os.path.join(control, "*")):
            subprocess.run(["ssh", "-O", "exit", "-o", "ControlPath=%s" % sock, "x"], capture_output=True,
                           timeout=30, check=False)
        subprocess.run(["rm", "-rf", control], check=False)
        with open(record_path) if os.path.exists(record_path) else open(os.devnull) as f:
            record = parse_record(f)
        seconds = time.time() - t0
        what = ("killed at %s" % describe(kill) if record["killed"] else "NOT killed at %s: rc %d" % (describe(kill), rc)
                ) if kill else "rc %d" % rc
        self.note("%s %s: %s, %.0f s, changed %s (%s)" % (label, state, what, seconds, changed_hosts(record),
                                                          os.path.relpath(base + ".log", ROOT)))
        self.last_log = os.path.relpath(base + ".log", ROOT)
        return rc, record, seconds

    def converge(self, label, state, idempotent=False, tags=None):
        """A run that must end rc 0 (and, idempotent, change nothing); the record."""
        rc, record, seconds = self.run(label, state, tags=tags)
        if rc != 0:
            self.fail("%s (%s): rc %d, failed on %s - see %s" % (label, state, rc, failed_hosts(record), self.last_log))
        elif idempotent and any(changed_hosts(record).values()):
            changed = ["%s on %s" % (s["task"], h) for s in record["starts"]
                       for h, st in record["results"].get(s["n"], {}).items() if st == "changed"]
            self.fail("%s (%s): a further run changed %s" % (label, state, "; ".join(changed)))
        return rc, record

    def killed(self, label, state, at, delay=0):
        """A run ended at the boundary `at` (delay: that many seconds after it, while the task runs); the way in
        checked after it. False when the run ended (or failed) before it reached the boundary."""
        rc, record, seconds = self.run(label, state, kill=at, delay=delay)
        failed = failed_before_kill(record)
        if failed:
            self.fail("%s: before %s, %s - see %s" % (label, describe(at), ", ".join(
                "%s failed on %s" % f for f in failed), self.last_log))
        for problem in self.way_in():
            self.fail("%s, killed at %s: %s" % (label, describe(at), problem))
        if record["killed"] is not None:
            self.reached.append((state, describe(at) + (" +%.1f s" % delay if delay else "")))
        return record["killed"] is not None

    def check_service(self, label):
        for problem in self.service():
            self.fail("%s: %s" % (label, problem))
        for problem in self.way_in():
            self.fail("%s: %s" % (label, problem))

    def check_undone(self, label, before):
        after = self.snapshots()
        kept = []
        for name in sorted(before):
            diff = compare(before[name], after[name], self.kept_for(name))
            kept += ["%s %s (%s)" % (name, k, w) for k, w in diff["kept"]]
            for problem in problems_of(diff, before[name], after[name]):
                self.fail("%s: %s: %s" % (label, name, problem))
        return kept

    # ---- the lane
    def baseline(self, result, again=True):
        """Apply, again, undo, again, from the user's host: the boundaries of each recorded run. (Without `again`,
        no second apply: the chains end with one.)"""
        self.before = self.snapshots()
        self.check_service("before the role")
        rc, applied = self.converge("apply-recorded", "present")
        self.check_service("after the apply")
        if again:
            self.converge("apply-again", "present", idempotent=True)
        rc, undone = self.converge("undo-recorded", "absent")
        self.converge("undo-again", "absent", idempotent=True)
        self.check_service("after the undo")
        result["kept_by_design"] = self.check_undone("after the undo", self.before)
        self.applied = applied
        apply_b, undo_b = boundaries(applied), boundaries(undone)
        result["boundaries"] = {"apply": apply_b, "undo": undo_b,
                                "apply_tasks": len(applied["starts"]), "undo_tasks": len(undone["starts"])}
        self.note("boundaries: %d in the apply (of %d task starts), %d in the undo (of %d)" % (
            len(apply_b), len(applied["starts"]), len(undo_b), len(undone["starts"])))
        return apply_b, undo_b

    def pair(self, k, a, u):
        """One cycle from the user's host: apply killed at a, apply, again, undo killed at u, undo, compare."""
        if a:
            self.killed("c%02d-apply-killed" % k, "present", a)
        self.converge("c%02d-apply" % k, "present")
        self.check_service("cycle %d, after the apply" % k)
        if a:
            self.converge("c%02d-apply-again" % k, "present", idempotent=True)
        if u:
            self.killed("c%02d-undo-killed" % k, "absent", u)
        self.converge("c%02d-undo" % k, "absent")
        self.check_service("cycle %d, after the undo" % k)
        self.check_undone("cycle %d, after the undo" % k, self.before)

    def chain(self, state, bounds, result):
        """From where the host is, a run killed at each boundary in turn - each resumes the one before it, and must
        get to the next boundary without a failure - then a run to the end (rc 0, the service answering) and, for
        the apply, one more that changes nothing; for the undo, the user's host as it was. In the apply, each task of
        in_flight is also cut off while it runs, in its place among the boundaries (cut_in_flight). The boundaries a
        resumed run did not reach (its task list differs from the recorded run's) are returned."""
        word = "apply" if state == "present" else "undo"
        flights = [s for s in self.applied["starts"] if s["task"] in self.in_flight] if state == "present" else []
        missed = []
        for i, b in enumerate(bounds, 1):
            while flights and flights[0]["n"] < b["n"]:
                self.cut_in_flight(flights.pop(0)["task"], result)
            if not self.killed("%s-killed-%02d" % (word, i), state, b):
                self.note("%s was not reached by a resumed run: tried again from the user's host" % describe(b))
                missed.append(b)
        for f in flights:
            self.cut_in_flight(f["task"], result)
        self.converge("%s-after-kills" % word, state)
        self.check_service("after the %s that followed the kills" % word)
        if state == "present":
            self.converge("apply-again-after-kills", state, idempotent=True)
        else:
            self.check_undone("after the undo that followed the kills", self.before)
        return missed

    def cut_in_flight(self, task, result):
        """`task` cut off halfway through its recorded duration, while it runs on the hosts; then the role's own run
        (its README's way back when the cut left Traefik down: the site's next run stops at the drain role, which
        needs the container) must end rc 0. What it found is kept (the module's "found ..." warnings); the chain goes
        on from there."""
        d = duration(self.applied, task)
        if not d:
            self.fail("%s: not in the recorded apply, so it cannot be cut off in flight" % task)
            return
        at = {"task": task, "occurrence": 1, "after": "its start, %.1f s in" % (d / 2)}
        self.killed("in-flight-killed", "present", at, delay=round(d / 2, 1))
        self.converge("in-flight-role", "present", tags=task.split(" : ")[0].split(".")[-1])
        with open(os.path.join(ROOT, self.last_log)) as f:
            found = [ln.strip() for ln in f if "found" in ln and "WARNING" in ln]
        result.setdefault("in_flight", []).append({"task": task, "delay": round(d / 2, 1), "found": found})
        self.note("cut in flight %.1f s into %s; the role's next run found: %s" % (d / 2, task, found or "nothing"))

    def __call__(self, mode="chains"):
        """mode: "chains" (each recorded run's boundaries killed one after the other, each kill resumed by the next
        run), "pairs" (one cycle from the user's host per apply and undo boundary), "baseline" (no kills)."""
        t0 = time.time()
        result = {"lane": self.name, "mode": mode, "cycles": [],
                  "hosts": dict((n, {"container": c, "systemd": sd}) for n, (c, p, sd) in self.hosts.items())}
        apply_b, undo_b = self.baseline(result, again=mode != "chains")
        if self.failures and mode != "baseline":  # the host is not clean: kills would test something else
            self.note("not trying the boundaries: the baseline failed")
            mode = "baseline"
        pairs = []
        if mode == "chains":
            missed_apply = self.chain("present", apply_b, result)
            missed_undo = self.chain("absent", undo_b, result)
            pairs = cycles(missed_apply, missed_undo)
        elif mode == "pairs":
            pairs = cycles(apply_b, undo_b)
        for k, (a, u) in enumerate(pairs, 1):
            if time.time() - t0 > LANE_BUDGET:
                self.fail("over its budget of %d s at cycle %d: boundaries left untried" % (LANE_BUDGET, k))
                break
            c0, failed = time.time(), len(self.failures)
            self.pair(k, a, u)
            result["cycles"].append({"apply_killed_at": a, "undo_killed_at": u, "seconds": round(time.time() - c0),
                                     "failures": self.failures[failed:]})
        result.update(seconds=round(time.time() - t0), failures=self.failures, log=self.log, killed_at=self.reached)
        with open(os.path.join(self.dir, "result.json"), "w") as f:
            json.dump(result, f, indent=1)
        return result


class Nas(Lane):
    """The NAS: its Docker engine, the user's Traefik from a compose project with a static file and one site
    (lab/user-configs/nas/filename, as lab/edge.py makes the lab's NAS), the user's Prometheus rules and
    node_exporter textfile directories; tcp_drain, traefik_inflight and autoheal."""
    name = tags = "nas"
    hosts = {"nas-plain": ("hle-int-nas", 2260, False), "nas-systemd": ("hle-int-nas-sd", 2261, True)}
    absent = {"tcp_drain_state": "absent", "traefik_inflight_state": "absent", "autoheal_state": "absent"}
    kept = ()
    # the change of the user's Traefik is one task: cut off inside it too (its restart in flight)
    in_flight = ("homelab.edge.traefik_inflight : Put the in-flight limit on every router of the entrypoints (rolled back when "
                 "Traefik loses anything)",)
    IMAGES = ["homelab-edge/nas:lab", "homelab-edge/autoheal:lab", "homelab-edge/socket-proxy:lab"]

    def up_one(self, name):
        container, port, systemd = self.hosts[name]
        # a plain clone's lab may lack an upstream image (lab/upstream_images.py): its part is left out by tag
        gone = upstream_images.missing()
        hosts.up(container, NETWORK, port, docker=True, load=[i for i in self.IMAGES if i not in gone], systemd=systemd)
        edge.traefik({"nas": container})
        hosts.sh("docker", "exec", container, "mkdir", "-p", "/srv/monitoring/rules", "/srv/monitoring/textfile")

    def up(self):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(self.up_one, sorted(self.hosts)))

    def group_vars(self):
        # the Prometheus rules files, with --rules: one write and one removal per role, three boundaries each way
        rules = dict(("%s_prometheus_rules_file" % r, "/srv/monitoring/rules/%s.rules.yml" % r)
                     for r in ("tcp_drain", "traefik_inflight", "autoheal")) if self.rules else {}
        return dict(rules, traefik_inflight_container="traefik",
                    traefik_inflight_healthcheck={"interval": "2s", "timeout": "2s", "retries": 3, "start_period": "3s"},
                    traefik_inflight_proxy_protocol_trusted_ips=["10.8.0.1/32"],
                    tcp_drain_containers=["traefik"], tcp_drain_metrics_dir="/srv/monitoring/textfile",
                    autoheal_image="homelab-edge/autoheal:lab", autoheal_socket_proxy=True,
                    autoheal_socket_proxy_image="homelab-edge/socket-proxy:lab", autoheal_watched=["traefik"],
                    autoheal_interval=2)

    def service(self):
        out = []
        for name, (container, port, sd) in sorted(self.hosts.items()):
            ip = address(container)
            # a run's end may be moments after Traefik was re-created: it gets a little while to answer
            if not within(30, lambda: https_status(ip) == 200):
                out.append("%s: https://%s/ through Traefik's entrypoint at %s:443 answers %s" % (
                    name, SITE, ip, https_status(ip)))
        return out


class Vps(Lane):
    """The VPS: sshd on 2222, nginx as the user's TCP stream proxy on 80 and 443 (lab/user-configs/vps/
    nginx-tunnel.conf) to a Traefik behind it that accepts PROXY protocol from it, a UDP service on 51820 standing in
    for WireGuard. Without systemd, fresh (ufw installed, inactive), as molecule/vps_connlimit's vps-fresh; with
    systemd, as an admin runs it (ufw active, the ports allowed). tcp_drain, vps_connlimit and vps_proxy_protocol."""
    name = tags = "vps"
    hosts = {"vps-plain": ("hle-int-vps", 2262, False), "vps-systemd": ("hle-int-vps-sd", 2263, True)}
    absent = {"tcp_drain_state": "absent", "vps_connlimit_state": "absent", "vps_proxy_protocol_state": "absent"}
    # What vps_connlimit's undo keeps, as its README ("Undo") and homelab.edge.ufw_revert's documentation say:
    # (regex over a snapshot key, why, the only host it applies to or None)
    kept = (
        (r"/var/lib/homelab-edge(/ufw-revert(/.*)?)?", "the reverts kept on the host (ufw_revert state=query)", None),
        (r"/etc/ufw/(before|after)\.init", "ufw_revert's boot hook: 'the block stays in place' (no systemd)",
         "vps-plain"),
        (r"(/etc/systemd/system/(sysinit\.target\.wants/)?|unit file |unit )homelab-edge-ufw-revert-boot\.service",
         "ufw_revert's boot unit, enabled", "vps-systemd"),
        (r"/etc/systemd/system/sysinit\.target\.wants", "the directory of the boot unit's link", "vps-systemd"),
        (r"/etc/ufw/(user6?\.rules|ufw\.conf)", "vps_connlimit's undo: 'ufw stays enabled with its rules'",
         "vps-plain"),
        (r"firewall:ip6?tables", "vps_connlimit's undo: 'ufw stays enabled with its rules'", "vps-plain"),
    )

    def up(self):
        subprocess.run(["docker", "rm", "-f", BACKEND], capture_output=True, check=False)
        hosts.network(NETWORK)
        subnet = json.loads(hosts.sh("docker", "network", "inspect", NETWORK).stdout)[0]["IPAM"]["Config"][0]["Subnet"]
        hosts.sh("docker", "run", "-d", "--name", BACKEND, "--network", NETWORK, "--label", hosts.LABEL,
                 "homelab-edge/nas:lab", "--entrypoints.web.address=:80",
                 "--entrypoints.web.proxyProtocol.trustedIPs=%s" % subnet,
                 "--entrypoints.websecure.address=:443", "--entrypoints.websecure.http.tls=true",
                 "--entrypoints.websecure.proxyProtocol.trustedIPs=%s" % subnet,
                 "--ping=true", "--ping.entryPoint=websecure")
        self.backend = address(BACKEND)
        with open(os.path.join(ROOT, "lab", "user-configs", "vps", "nginx-tunnel.conf")) as f:
            conf = f.read().replace("10.8.0.2", self.backend)
        path = os.path.join(self.dir, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda n: self.up_one(n, path), sorted(self.hosts)))

    def up_one(self, name, conf):
        container, port, systemd = self.hosts[name]
        hosts.up(container, NETWORK, port, nginx_conf=conf, sshd_port=SSHD_PORT, systemd=systemd)
        hosts.sh("docker", "exec", "-d", container, "python3", "-c", UDP_STANDIN)
        if systemd:  # the admin's VPS: ufw on, with the way in and the proxied ports allowed
            hosts.sh("docker", "exec", container, "sh", "-c",
                     "ufw allow %d/tcp && ufw allow 80/tcp && ufw allow 443/tcp && ufw allow %d/udp && "
                     "ufw --force enable" % (SSHD_PORT, UDP_PORT))
        if not within(30, lambda: udp_answers(address(container))):
            raise RuntimeError("the UDP stand-in on %s does not answer" % container)

    def down(self):
        Lane.down(self)
        subprocess.run(["docker", "rm", "-f", BACKEND], capture_output=True, check=False)

    def group_vars(self):
        return {"vps_connlimit_install_packages": False,  # the lab image has them; no apt in tests
                "vps_connlimit_confirm_timeout": CONFIRM_TIMEOUT,
                # backups are the user's to keep: with them on, each change leaves a dated copy by design
                "vps_connlimit_backup": False, "vps_proxy_protocol_backup": False,
                "vps_proxy_protocol_upstreams": ["%s:443" % self.backend, "%s:80" % self.backend]}

    def host_vars(self, name):
        # the controller reaches the VPS at its own address, not at 127.0.0.1 (the SSH port's forward)
        return {"vps_connlimit_prove_address": address(self.hosts[name][0])}

    def service(self):
        out = []
        for name, (container, port, sd) in sorted(self.hosts.items()):
            ip = address(container)
            if not within(10, lambda: https_status(ip, path="/ping") == 200):
                out.append("%s: https://%s/ping through nginx's stream proxy answers %s" % (
                    name, ip, https_status(ip, path="/ping")))
            if not within(10, lambda: http_status(ip) is not None):
                out.append("%s: http://%s/ through nginx's stream proxy: no answer" % (name, ip))
        return out

    def way_in(self):
        out = []
        for name, (container, port, sd) in sorted(self.hosts.items()):
            ip = address(container)
            if not within(6, lambda: new_ssh_login(ip), interval=1):
                out.append("%s: the way in is cut: a new SSH login on %s:%d fails" % (name, ip, SSHD_PORT))
            if not within(6, lambda: udp_answers(ip), interval=1):
                out.append("%s: the tunnel's port is cut: %s:%d/udp does not answer" % (name, ip, UDP_PORT))
        return out


LANES = {"nas": Nas, "vps": Vps}


def lane_skip_tags(name):
    """The site's tags a lane leaves out for want of an upstream image (lab/upstream_images.py), with why."""
    if name != "nas":
        return [], []
    tags = upstream_images.skipped_tags()
    return tags, [upstream_images.reason(t) for t in tags]


def run_lanes(names, keep=False, mode="chains", rules=False):
    """Each lane on its own hosts, side by side: {name: result}."""
    os.makedirs(OUT, exist_ok=True)
    lanes = {}
    for name in names:
        tags, why = lane_skip_tags(name)
        lane = LANES[name](skip_tags=tags, rules=rules)
        subprocess.run(["rm", "-rf", lane.dir], check=False)
        os.makedirs(lane.dir)
        for w in why:
            lane.note("left out: %s" % w)
        lanes[name] = lane

    def one(lane):
        t0 = time.time()
        try:
            lane.down()
            lane.up()
            lane.write_inventory()
            up = time.time() - t0
            lane.note("hosts up in %.0f s" % up)
            result = lane(mode=mode)
            result["hosts_seconds"] = round(up)
            return result
        except Exception as e:  # a lane that cannot run is a failure of its own, said as such
            lane.fail("the lane could not run: %r%s" % (e, (": " + e.stderr.strip()[-1000:]) if getattr(e, "stderr", None) else ""))
            return {"lane": lane.name, "failures": lane.failures, "log": lane.log}
        finally:
            if not keep:
                lane.down()

    hosts.network(NETWORK)  # once, before the lanes make their hosts on it side by side
    try:
        with concurrent.futures.ThreadPoolExecutor(len(lanes)) as pool:
            futures = dict((name, pool.submit(one, lane)) for name, lane in lanes.items())
            return dict((name, f.result()) for name, f in futures.items())
    finally:
        if not keep:
            hosts.sh("docker", "network", "rm", NETWORK, check=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lanes", nargs="*", help=" ".join(sorted(LANES)) + " (default: all)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--mode", choices=["chains", "pairs", "baseline"], default="chains")
    ap.add_argument("--rules", action="store_true", help="the NAS roles write their Prometheus rules files too")
    a = ap.parse_args(argv)
    unknown = [n for n in a.lanes if n not in LANES]
    if unknown:
        ap.error("no lane %s (%s)" % (", ".join(unknown), ", ".join(sorted(LANES))))
    results = run_lanes(a.lanes or sorted(LANES), keep=a.keep, mode=a.mode, rules=a.rules)
    bad = 0
    for name, r in sorted(results.items()):
        print("=== %s: %d failures%s" % (name, len(r["failures"]), "".join("\n  " + f for f in r["failures"])))
        bad += len(r["failures"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
