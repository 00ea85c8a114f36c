"""A flood from many addresses through the lab's edge path (lab/edge.py: clients -> VPS -> WireGuard -> NAS), and what
it leaves behind - for Molecule default's test, the benchmark and the demo (issue 63).

The flood comes from the internet client (`<prefix>-client1`): the compiled generator (floodgen.py) runs in its
network namespace (nsenter), its sources a /22 made local there by an AnyIP route, the VPS routing the prefix back to
the client, so each connection reaches the VPS from one of up to 1,022 distinct addresses; `sources=1` is the same
flood from one address. Meanwhile, once a second (watch()):

- the LAN's probes to the NAS, on the LAN (`<prefix>-lan-client` -> the NAS's LAN address: site and auth behind
  Traefik, the NAS's sshd beside it) - a route that never touches the VPS;
- the public path's probes (`<prefix>-client2` -> the VPS -> the tunnel: site), an ordinary client beside the flood;
- on the NAS (host_sampler.py): Traefik's CPU, conntrack, its sockets, open files and threads.

Only the lab's own containers and the lab's private addresses; every run bounded in count and time.
"""
import contextlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "lab"))
import edge  # noqa: E402
import floodgen  # noqa: E402
import probes  # noqa: E402

PREFIX = "10.201.0.0/22"  # 1,022 source addresses at most (the generator is bounded at 4,096)
FIRST = "10.201.0.1"
SNI, PATH = "site.nas.lab", "/slower"   # the NAS image's backend holds /slower 6 s
HEALTHY_RUN_S = 5  # answered every probe this many seconds in a row: everything answers again


def sh(*argv, check=True, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=kw.pop("timeout", 120), **kw)


class Lab(object):
    """The edge lab of a prefix: its containers and addresses."""

    def __init__(self, prefix="lab"):
        self.prefix, self.n = prefix, edge.names(prefix)
        self.vps, self.nas = self.n["vps"], self.n["nas"]
        self.client, self.public, self.lan = self.n["clients"][0], self.n["clients"][1], self.n["lan_client"]
        self.vps_wan = address(self.vps, self.n["wan"])
        self.nas_lan = address(self.nas, self.n["lan"])
        self.client_wan = address(self.client, self.n["wan"])

    def pid(self, container):
        return int(sh("docker", "inspect", "-f", "{{.State.Pid}}", container).stdout)

    def traefik_pid(self):
        """Traefik's pid as the NAS sees it (the NAS runs its own engine)."""
        return int(sh("docker", "exec", self.nas, "docker", "inspect", "-f", "{{.State.Pid}}", "traefik").stdout)


def address(container, network):
    return sh("docker", "inspect", "-f", "{{(index .NetworkSettings.Networks \"%s\").IPAddress}}" % network,
              container).stdout.strip()


@contextlib.contextmanager
def sources(lab):
    """The source prefix local to the flooding client and routed back to it by the VPS, while the block runs."""
    pid = lab.pid(lab.client)
    with floodgen.anyip(PREFIX, pid):
        sh("docker", "exec", lab.vps, "ip", "route", "replace", PREFIX, "via", lab.client_wan)
        try:
            yield
        finally:
            sh("docker", "exec", lab.vps, "ip", "route", "del", PREFIX, check=False)


FIFO = 10  # the generator's real-time priority: the machine's other work cannot hold its starts back


def flood(lab, n_sources, per_source, rate, mode="tls", hold=10.0, timeout=10.0, port=443, cpus=None, timeline=True):
    """One run of the generator from the client's namespace to the VPS (inside sources())."""
    return floodgen.run(lab.vps_wan, port, FIRST, n_sources, per_source, rate, mode=mode, hold=hold, timeout=timeout,
                        sni=SNI, path=PATH, netns_pid=lab.pid(lab.client), cpus=cpus, timeline=timeline, fifo=FIFO)


def _start(container, program, args, out):
    import docker
    path = probes.put_program(docker.from_env().containers.get(container), program)
    sh("docker", "exec", "-d", container, "sh", "-c", "python3 %s %s > %s 2>/dev/null" % (
        path, " ".join(str(a) for a in args), out))


def _lines(container, path):
    out = sh("docker", "exec", container, "cat", path, check=False).stdout
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


class Watch(object):
    """The probes and the NAS's sampler over `seconds` (started now); collect() stops them and reads them back."""

    def __init__(self, lab, seconds, interval=1.0):
        self.lab, self.tag, self.t0 = lab, "many-%d" % int(time.time() * 1000), time.time()
        _start(lab.nas, "host_sampler.py", [lab.traefik_pid(), seconds], "/tmp/sample-%s.jsonl" % self.tag)
        _start(lab.lan, "probe_loop.py", [lab.nas_lan, 443, seconds, interval, "site=%s/" % SNI, "auth=auth.nas.lab/",
                                          "ssh=tcp:22"], "/tmp/probe-%s.jsonl" % self.tag)
        _start(lab.public, "probe_loop.py", [lab.vps_wan, 443, seconds, interval, "public=%s/" % SNI],
               "/tmp/public-%s.jsonl" % self.tag)

    def peek(self):
        """The probes so far, without stopping anything (no samples: the sampler's are read at the end)."""
        return {"t0": self.t0, "samples": [], "lan": _lines(self.lab.lan, "/tmp/probe-%s.jsonl" % self.tag),
                "public": _lines(self.lab.public, "/tmp/public-%s.jsonl" % self.tag)}

    def collect(self):
        lab = self.lab
        for container, program in ((lab.nas, "host_sampler.py"), (lab.lan, "probe_loop.py"),
                                   (lab.public, "probe_loop.py")):
            sh("docker", "exec", container, "pkill", "-f", program, check=False)
        time.sleep(1)
        return {"t0": self.t0, "samples": _lines(lab.nas, "/tmp/sample-%s.jsonl" % self.tag),
                "lan": _lines(lab.lan, "/tmp/probe-%s.jsonl" % self.tag),
                "public": _lines(lab.public, "/tmp/public-%s.jsonl" % self.tag)}


def answered(p):
    """A probe answered: an HTTP status behind Traefik (any: a 429 is an answer, fast), sshd's banner beside it."""
    return bool(p.get("ok")) if "ok" in p else p.get("code") is not None


def served(p):
    """A probe served: 2xx (the LAN's must be), sshd's banner."""
    return bool(p.get("ok")) if "ok" in p else p.get("code") is not None and 200 <= p["code"] < 300


def probe_counts(rows):
    out = {"sent": len(rows), "served": 0, "429": 0, "other_http": 0, "timeout": 0, "error": 0}
    for p in rows:
        if served(p):
            out["served"] += 1
        elif p.get("code") == 429:
            out["429"] += 1
        elif p.get("code") is not None:
            out["other_http"] += 1
        else:
            out["timeout" if p.get("error") == "timeout" else "error"] += 1
    lat = sorted(p["seconds"] for p in rows if served(p))
    out["latency_p50_s"] = lat[len(lat) // 2] if lat else None
    out["latency_max_s"] = lat[-1] if lat else None
    return out


def answers_again(rows, end, ok=served, run_s=HEALTHY_RUN_S):
    """Seconds after `end` (epoch) from which every probe of `rows` in each second is `ok`, `run_s` seconds in a row
    (None: not within the rows)."""
    by_second = {}
    for p in rows:
        if p["t"] >= end:
            by_second.setdefault(int(p["t"] - end), []).append(ok(p))
    if not by_second:
        return None
    last = max(by_second)
    for s in range(0, last - run_s + 2):
        if all(by_second.get(x) and all(by_second[x]) for x in range(s, s + run_s)):
            return s
    return None


def summary(watched, flood_start, flood_end):
    """The figures of one run: the probes during the flood (LAN: each target; public), the NAS's peaks, and the
    seconds until everything answers again after the flood."""
    lan, public, samples = watched["lan"], watched["public"], watched["samples"]
    during = [p for p in lan if flood_start <= p["t"] <= flood_end]
    out = {"lan_during": dict((t, probe_counts([p for p in during if p["target"] == t])) for t in ("site", "auth", "ssh")),
           "public_during": probe_counts([p for p in public if flood_start <= p["t"] <= flood_end]),
           "lan_again_s": answers_again(lan, flood_end),
           "public_again_s": answers_again(public, flood_end),
           "peak": {}}
    for s in samples:  # the sockets a flood holds open at Traefik (not those a flood before left in TIME_WAIT)
        if None not in (s.get("sockets"), s.get("time_wait"), s.get("fin_wait")):
            s["open_sockets"] = s["sockets"] - s["time_wait"] - s["fin_wait"]
    for key in ("cpu_pct", "conntrack", "sockets", "open_sockets", "time_wait", "fds", "threads"):
        values = [s[key] for s in samples if flood_start <= s["t"] <= flood_end + 30 and s.get(key) is not None]
        out["peak"][key] = max(values) if values else None
    last = [s for s in samples if s["t"] >= flood_end]
    out["conntrack_at_end"] = last[0].get("conntrack") if last else None
    return out


def traefik_health(lab):
    return sh("docker", "exec", lab.nas, "docker", "inspect", "-f",
              "{{if .State.Health}}{{.State.Health.Status}}{{end}} restarts={{.RestartCount}} started={{.State.StartedAt}}",
              "traefik", check=False).stdout.strip()


def inventory(prefix, path):
    """inventories/lab/hosts.yml's VPS and NAS, renamed for an edge lab of another prefix (its SSH ports,
    edge.ssh_ports), written to `path` (the k3d hosts left out)."""
    import yaml
    with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "inventories", "lab", "hosts.yml")) as f:
        inv = yaml.safe_load(f)
    ssh = inv["all"]["children"]["lab_ssh"]
    ports = edge.ssh_ports(prefix)
    for group, role in (("vps", "vps"), ("nas", "nas")):
        hostvars = ssh["children"][group]["hosts"]["lab-%s" % role]
        hostvars["ansible_port"] = ports[role]
        ssh["children"][group]["hosts"] = {"%s-%s" % (prefix, role): hostvars}
    with open(path, "w") as f:
        yaml.safe_dump({"all": {"children": {"lab_ssh": ssh}}}, f, default_flow_style=False)
    return path


def inventory_inside(lab, path):
    """The lab's inventory (inventory(), its VPS alone) as a controller inside the flooding client's network namespace
    reaches it: at the VPS's address on the internet side, on sshd's own port there."""
    import yaml
    inventory(lab.prefix, path)
    with open(path) as f:
        inv = yaml.safe_load(f)
    ssh = inv["all"]["children"]["lab_ssh"]
    ssh["vars"]["ansible_host"] = lab.vps_wan
    ssh["children"]["vps"]["hosts"][lab.vps].update(ansible_host=lab.vps_wan, ansible_port=edge.VPS_SSHD_PORT)
    del ssh["children"]["nas"]
    with open(path, "w") as f:
        yaml.safe_dump(inv, f, default_flow_style=False)
    return path


def prove_inside(lab, inventory_path, extra, timeout=600):
    """homelab.edge.prove --tags vps, its controller in the flooding client's network namespace (nsenter: this
    machine's files, the client's addresses - the source prefix among them inside sources()): (exit code, output,
    the JSON report or None)."""
    import tempfile
    root = os.path.dirname(os.path.dirname(HERE))
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "prove.json")
        out = subprocess.run(["nsenter", "-t", str(lab.pid(lab.client)), "-n", "ansible-playbook", "-i", inventory_path,
                              os.path.join(root, "playbooks", "prove.yml"), "--tags", "vps",
                              "-e", "prove_output=%s" % report, "-e", json.dumps(extra)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
        if not os.path.exists(report):
            return out.returncode, out.stdout, None
        with open(report) as f:
            return out.returncode, out.stdout, json.load(f)


def tunnel_steps(lab, port):
    """What the docs ask of the admin for Traefik's total for the tunnel, done in the lab: the routes list the
    tunnel's entrypoint beside websecure (their file, where the role moved it), and the VPS's nginx forwards 443 to
    the tunnel's port on the NAS instead of the LAN's (proxy_protocol stays on that server)."""
    sh("docker", "exec", lab.nas, "sed", "-i", "--follow-symlinks", "s/entryPoints: \\[websecure\\]/entryPoints: "
       "[websecure, tunnel]/", "/srv/traefik/config/dynamic/dynamic.yml")
    sh("docker", "exec", lab.vps, "sed", "-i", "s/proxy_pass %s:443;/proxy_pass %s:%d;/" % (
        edge.TUNNEL["nas"], edge.TUNNEL["nas"], port), "/etc/nginx/nginx.conf")
    sh("docker", "exec", lab.vps, "sh", "-c", "nginx -t && systemctl reload nginx")


def way_in(lab, ssh_port):
    """The way in, from this machine: a new SSH login's banner at the VPS (its published SSH port) and the tunnel up
    (the VPS pings the NAS's tunnel address over WireGuard's UDP)."""
    import socket
    try:
        with socket.create_connection(("127.0.0.1", ssh_port), timeout=5) as s:
            ssh = s.recv(64).startswith(b"SSH-")
    except OSError:
        ssh = False
    tunnel = sh("docker", "exec", lab.vps, "ping", "-c", "1", "-W", "2", edge.TUNNEL["nas"], check=False).returncode == 0
    return {"ssh_banner": ssh, "tunnel": tunnel}
