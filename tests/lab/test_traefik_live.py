"""The real Traefik reads what the module wrote: for one collected guide
config of each kind (a YAML file, a TOML file, flags in compose), the
module's plan (tests/unit/.../test_traefik_guides.py) is written out as the
module writes it, and the lab's Traefik binary (the release the image says,
v3 or v2) starts on it in a container of its own with no network but its
loopback, mounted as the new compose file (or docker run) says. Its own API
then shows the middleware loaded as written and on the limited entrypoints
(it started: no listener of the role's took a port of theirs), and the
health check the role adds finds ping. Issue 53's shapes too: a user's own maxConcurrentStreams and ping
kept, and Traefik in a network namespace shared as a host's (network_mode: host, a port there taken):
ping on a free loopback port, never 8080. Needs the lab's images (make test builds them first)."""
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "module_utils"))
__import__("conftest")  # tests/unit's: the collection importable as ansible_collections.homelab.edge
import test_traefik_guides as guides  # noqa: E402
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight

IMAGES = {3: "homelab-edge/nas:lab", 2: "homelab-edge/nas-v2:lab"}
# (case, kind, the Traefik major it runs on: None - the image tag's)
CASES = [
    ("03-technotim-launchpad-traefik-yml-root", "yaml", None),   # /traefik.yml + config.yml mounted alone
    # /traefik.toml with a relative routes file; its image says latest, but its [pilot] is v2's only: on v3
    # the real Traefik refuses to start on the guide's own file ("Pilot configuration has been removed in v3")
    ("41-make-my-server-toml-working-dir", "toml", 2),
    ("31-authelia-lite-quoted-cli-http3-port", "flags", None),   # quoted flags, an http3 entrypoint
]


def without_ping(case):
    """Case 45's sample without its [ping] (a user who never turned ping on): ping is then the role's to place."""
    path = os.path.join(case, "traefik.toml")
    with open(path) as f:
        text = f.read()
    start = text.index("# Enable ping\n[ping]\n")
    end = text.index("####", start)
    with open(path, "w") as f:
        f.write(text[:start] + text[end:])


# Issue 53, on the real Traefik: (case, a change to the copy first, what must hold)
USERS = [
    # Coolify's flags: its maxConcurrentStreams=50 kept, its ping on http kept and answering its own health check
    ("44-coolify-proxy-cli-max-streams", None, {"streams": {"https": 50}, "ping": ":80"}),
    # network_mode host, in a namespace where 9098 is taken (as a host's would be): the TOML's new
    # [providers.file] after [providers.docker]'s commented-out options; the user's [ping] on :8080 kept
    ("45-lukasnellen-host-network-v2-sample-toml", None, {"host": [9098], "ping": ":8080"}),
    # the same without [ping]: the role's ping on the first free loopback port (9097), nothing on 8080
    ("45-lukasnellen-host-network-v2-sample-toml", without_ping, {"host": [9098], "ping": "127.0.0.1:9097"}),
]


def holder(image, ports):
    """A network namespace standing for a host's, with `ports` held by something else (busybox nc)."""
    name = "homelab-edge-traefik-host-%s" % uuid.uuid4().hex[:8]
    listen = " ".join("busybox nc -l -p %d & " % p for p in ports)
    docker("run", "-d", "--network", "none", "--name", name, "--entrypoint", "sh", image, "-c",
           "%s exec sleep 600" % listen)
    for dummy in range(40):
        got = docker("exec", name, "sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true", check=False)
        if set(ports) <= traefik_inflight.listening_ports(got.stdout):
            return name, traefik_inflight.listening_ports(got.stdout)
        time.sleep(0.25)
    raise AssertionError("the ports %s were not held in %s" % (ports, name))


@pytest.mark.parametrize("name, prepare, want", USERS, ids=["coolify-streams-kept", "host-toml-users-ping",
                                                            "host-toml-roles-ping"])
def test_the_real_traefik_runs_with_the_users_values_and_on_the_hosts_network(name, prepare, want, tmp_path):
    image = IMAGES[3]
    netns, listening = holder(image, want["host"]) if "host" in want else (None, set())
    container = "homelab-edge-traefik-live-%s" % uuid.uuid4().hex[:8]
    try:
        extra = {"listening": sorted(listening),
                 "sysctls": {"net.ipv4.tcp_fin_timeout": 15, "net.ipv4.tcp_abort_on_overflow": 1}}
        facts, plan, opts = guides.run_case(name, tmp_path, extra, prepare=prepare)
        assert plan["ping"]["address"] == want["ping"], plan["ping"]
        if netns:
            assert plan["network_mode"] == "host" and "sysctls" not in plan["compose"]["new"]
        write_out(facts, plan)
        inspect, dummy = guides.from_compose(str(tmp_path / name))
        volumes = []
        for m in inspect["Mounts"]:
            if m["Type"] == "bind" and os.path.exists(m["Source"]) and "docker.sock" not in m["Source"]:
                volumes += ["-v", "%s:%s:ro" % (os.path.realpath(m["Source"]), m["Destination"])]
        network = "container:%s" % netns if netns else "none"
        docker("run", "-d", "--network", network, "--name", container, *volumes, image,
               *traefik_inflight.traefik_args(inspect))
        eps = api_entrypoints(container)
        for ep in plan["entrypoints"]:
            assert "inflight-limit@file" in ((eps[ep].get("http") or {}).get("middlewares") or []), eps[ep]
        for ep, streams in want.get("streams", {}).items():
            assert (eps[ep].get("http2") or {}).get("maxConcurrentStreams") == streams, eps[ep]
        if want["ping"].startswith("127.0.0.1:"):
            assert eps[traefik_inflight.PING_ENTRYPOINT]["address"] == want["ping"]
            held = docker("exec", container, "sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true").stdout
            assert 8080 not in traefik_inflight.listening_ports(held), "something listens on 8080: Traefik's default entrypoint"
        # the health check (the user's own, or the one the role adds) finds ping
        svc = traefik_inflight.lookup(guides.yaml.safe_load(open(plan["compose"]["path"]).read()),
                                      ["services", facts["compose"]["service"]])
        test = svc["healthcheck"]["test"]
        argv = ["sh", "-c", test] if isinstance(test, str) else test[1:]
        said = docker("exec", container, *argv, check=False)
        assert said.returncode == 0 and "OK" in said.stdout, said.stdout + said.stderr
    finally:
        docker("rm", "-f", container, check=False)
        if netns:
            docker("rm", "-f", netns, check=False)


def docker(*argv, check=True):
    return subprocess.run(["docker"] + list(argv), capture_output=True, text=True, check=check, timeout=60)


def api_entrypoints(container):
    """Traefik's entrypoints as its API on the role's port answers them, {name: entrypoint} (bounded: 20 s, or
    until the container stops); fails with Traefik's log when it never answers."""
    answer, t0 = None, time.time()
    while time.time() - t0 < 20:
        got = docker("exec", container, "wget", "-q", "-O", "-", "http://127.0.0.1:9099/api/entrypoints", check=False)
        if got.returncode == 0:
            answer = json.loads(got.stdout)
            break
        if docker("inspect", "-f", "{{.State.Running}}", container, check=False).stdout.strip() != "true":
            break
        time.sleep(0.5)
    logs = docker("logs", container, check=False)
    assert answer is not None, "Traefik did not answer on the role's API: %s" % (logs.stdout + logs.stderr)[-3000:]
    return dict((e["name"], e) for e in answer)


def write_out(facts, plan):
    """What the module writes, as it writes it: the directory, the moved routes file, each file."""
    provider = plan["provider"]
    if provider["kind"] == "filename" and not os.path.exists(provider["file_host"]):
        with open(provider["file_host"], "w") as f:  # the guide does not give its routes file: one of the user's
            f.write("http:\n  middlewares:\n    mine:\n      headers:\n        frameDeny: true\n"
                    if not provider["file_host"].endswith(".toml") else
                    "[http.middlewares.mine.headers]\n  frameDeny = true\n")
    os.makedirs(provider["dir_host"], exist_ok=True)
    if provider["kind"] == "filename" and not os.path.islink(provider["file_host"]):
        dest = os.path.join(provider["dir_host"], os.path.basename(provider["file_host"]))
        os.rename(provider["file_host"], dest)
        os.symlink(os.path.relpath(dest, os.path.dirname(provider["file_host"])), provider["file_host"])
    for key in ("static", "compose"):
        if plan.get(key) and plan[key]["new"] != plan[key]["old"]:
            with open(plan[key]["path"], "w", newline="") as f:
                f.write(plan[key]["new"])
    with open(os.path.join(provider["dir_host"], "inflight-limit.yml"), "w") as f:
        f.write(traefik_inflight.dynamic_text({"name": "inflight-limit", "amount": 400}))


@pytest.mark.parametrize("name, kind, major", CASES)
def test_the_real_traefik_runs_what_the_module_wrote(name, kind, major, tmp_path):
    facts, plan, opts = guides.run_case(name, tmp_path)
    assert (facts["source"]["mode"] == "flags") == (kind == "flags")
    assert plan["static"] is None or traefik_inflight.static_format(plan["static"]["path"]) == kind or kind == "flags"
    write_out(facts, plan)
    # the container as the new files make it
    inspect, dummy = guides.from_compose(str(tmp_path / name))
    args = traefik_inflight.traefik_args(inspect)
    volumes = []
    for m in inspect["Mounts"]:
        if m["Type"] == "bind" and os.path.exists(m["Source"]) and "docker.sock" not in m["Source"]:
            volumes += ["-v", "%s:%s:ro" % (os.path.realpath(m["Source"]), m["Destination"])]
    container = "homelab-edge-traefik-live-%s" % uuid.uuid4().hex[:8]
    image = IMAGES[major or facts["major"]]
    try:
        docker("run", "-d", "--network", "none", "--name", container, *volumes, image, *args)
        eps = api_entrypoints(container)
        for ep in opts["entrypoints"]:
            assert "inflight-limit@file" in ((eps[ep].get("http") or {}).get("middlewares") or []), eps[ep]
        mw = json.loads(docker("exec", container, "wget", "-q", "-O", "-",
                               "http://127.0.0.1:9099/api/http/middlewares/inflight-limit@file").stdout)
        assert mw["status"] == "enabled" and mw["inFlightReq"]["amount"] == 400
        # the health check the role adds finds ping
        svc = traefik_inflight.lookup(guides.yaml.safe_load(open(plan["compose"]["path"]).read()),
                                      ["services", facts["compose"]["service"]])
        test = svc["healthcheck"]["test"][1:]
        said = docker("exec", container, *test, check=False)
        assert said.returncode == 0 and [ln for ln in said.stdout.splitlines() if ln.startswith("OK")], \
            said.stdout + said.stderr
    finally:
        docker("rm", "-f", container, check=False)


@pytest.mark.parametrize("major", [3, 2])
def test_the_labs_traefik_routes_a_container_of_this_engine(major):
    """Docker Engine 29 refuses clients below API 1.44; Traefik v2 up to 2.11.30 asked every engine for 1.24
    (traefik#12253) and routed no container there. The lab's Traefik (v3 and v2), on this machine's engine (the
    lab's: Engine 29), finds a container by its labels through its Docker provider."""
    tag = uuid.uuid4().hex[:8]
    traefik_c, backend = "homelab-edge-traefik-docker-%s" % tag, "homelab-edge-traefik-backend-%s" % tag
    try:
        docker("run", "-d", "--name", backend, "--label", "traefik.enable=true",
               "--label", "traefik.http.routers.probe-%s.rule=Host(`probe.lab`)" % tag,
               "--label", "traefik.http.services.probe-%s.loadbalancer.server.port=80" % tag,
               "--entrypoint", "sleep", IMAGES[major], "120")
        docker("run", "-d", "--network", "none", "--name", traefik_c,
               "-v", "/var/run/docker.sock:/var/run/docker.sock:ro", IMAGES[major],
               "--providers.docker=true", "--providers.docker.exposedByDefault=false",
               "--entrypoints.web.address=:8000", "--api.insecure=true", "--entrypoints.traefik.address=:9099")
        router, t0 = None, time.time()
        while time.time() - t0 < 20:
            got = docker("exec", traefik_c, "wget", "-q", "-O", "-",
                         "http://127.0.0.1:9099/api/http/routers/probe-%s@docker" % tag, check=False)
            if got.returncode == 0:
                router = json.loads(got.stdout)
                break
            time.sleep(0.5)
        logs = docker("logs", traefik_c, check=False)
        assert router is not None and router["status"] == "enabled", \
            "Traefik v%d routed no container of this engine: %s" % (major, (logs.stdout + logs.stderr)[-2000:])
    finally:
        docker("rm", "-f", traefik_c, backend, check=False)
