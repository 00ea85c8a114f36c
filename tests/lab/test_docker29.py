"""Docker Engine 29 in the lab (issue 32): the moby v2 module's dockerd
(lab/lab.sh engine29: the Engine 29 line on the Go module proxy, API 1.56),
run inside a lab host (homelab-edge/host:lab, privileged, its own network
namespace, its data on volumes), beside Debian 12's containerd 1.6.

On it, k3d's load balancer image (the lab's, from k3d's own proxy files) is
created the way k3d creates one (create, then values.yaml copied in), and the
keeper (roles/k3d_serverlb/files) patches its template before its first
render - reading Engine 29's events, which no longer carry `id` and
`status`. With the keeper reading the old event shape (the net removed)
every event is a KeyError and the created load balancer stays k3d's own.

Here the engine runs beside Debian 12's containerd 1.6 and starts no
container (this test needs none). Engine 29 with its own runtime (containerd
2, runc 1.3), started by systemd, running k3d and the role's keeper as a
systemd unit: molecule/k3d_engines."""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge")
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support")]
import keeper_library  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
from module_utils.k3d_serverlb import template as k3d_template  # noqa: E402

HOST = "hle-engine29"
LB_IMAGE = "homelab-edge/k3d-proxy:lab"
VALUES = "ports:\n  53.udp:\n  - 127.0.0.1\n  6443.tcp:\n  - 127.0.0.1\nsettings:\n  workerConnections: 1026\n"


def sh(*argv, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def engine():
    dockerd, proxy = os.path.join(CACHE, "bin", "dockerd29"), os.path.join(CACHE, "bin", "docker-proxy29")
    if not (os.path.exists(dockerd) and os.path.exists(proxy)):
        pytest.fail("no Engine 29 binaries: run lab/lab.sh engine29 (make setup does)")
    outer = docker.from_env()
    subprocess.run(["docker", "rm", "-f", HOST], capture_output=True, check=False)
    # its data on volumes, as the lab's hosts have it: overlayfs cannot stack on the container's own overlay
    sh("docker", "run", "-d", "--name", HOST, "--privileged", "--label", "homelab.edge.lab",
       "-v", "/var/lib/docker", "-v", "/var/lib/containerd", "homelab-edge/host:lab")
    try:
        sh("docker", "cp", os.path.realpath(dockerd), "%s:/usr/local/bin/dockerd" % HOST)
        sh("docker", "cp", os.path.realpath(proxy), "%s:/usr/local/bin/docker-proxy" % HOST)
        sh("docker", "exec", "-d", HOST, "sh", "-c", "exec /usr/local/bin/dockerd -H unix:///var/run/docker.sock "
           "-H tcp://0.0.0.0:2375 >/var/log/dockerd29.log 2>&1")
        # per network: Engine 29 (API 1.52) dropped the top-level NetworkSettings.IPAddress
        address = next(iter(outer.containers.get(HOST).attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        deadline = time.time() + 90
        while True:
            try:
                client = docker.DockerClient(base_url="tcp://%s:2375" % address, version="auto", timeout=60)
                client.ping()
                break
            except Exception:
                if time.time() > deadline:
                    raise AssertionError(sh("docker", "exec", HOST, "tail", "-n", "20", "/var/log/dockerd29.log").stdout)
                time.sleep(1)
        save = subprocess.Popen(["docker", "save", LB_IMAGE], stdout=subprocess.PIPE)
        sh("docker", "exec", "-i", HOST, "docker", "load", stdin=save.stdout)
        assert save.wait() == 0
        yield client, "tcp://%s:2375" % address
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", HOST], capture_output=True, check=False)


def test_the_engine_is_29(engine):
    client, dummy = engine
    v = client.version()
    assert v["Version"] == "v2.0.0-beta.24" and v["ApiVersion"] == "1.56", v


def test_engine_29_events_have_no_id_and_no_status(engine):
    """The shape the keeper reads (moby#50832): Action and Actor.ID only."""
    client, dummy = engine
    since = int(time.time()) - 1
    c = client.containers.create(LB_IMAGE, name="hle-event-probe", labels={"homelab.edge.probe": "1"})
    try:
        events = client.events(decode=True, since=since, until=int(time.time()) + 1,
                               filters={"type": "container", "label": "homelab.edge.probe=1"})
        created = [e for e in events if e.get("Action") == "create"]
    finally:
        c.remove(force=True)
    assert created and "id" not in created[0] and "status" not in created[0], created
    assert k3d_container.event_of(created[0]) == (c.id, "create")


def keeper(tmp, docker_host, old_events=False):
    lib = os.path.join(tmp, "lib")
    os.makedirs(lib)
    keeper_library.install(lib)
    if old_events:  # the net removed: the keeper as it read events before Engine 29
        path = os.path.join(lib, "module_utils", "k3d_serverlb", "container.py")
        with open(path, "a") as f:
            f.write("\n\ndef event_of(event):\n    return event[\"id\"], event[\"status\"]\n")
    config = os.path.join(tmp, "k3d-serverlb-d29.json")
    with open(config, "w") as f:
        json.dump(dict(k3d_fix.DEFAULTS, clusters=["d29"], names=[], render_timeout=30, metrics_dir="",
                       metrics_interval=30), f)
    log = open(os.path.join(tmp, "keeper.log"), "w")
    proc = subprocess.Popen([sys.executable, os.path.join(lib, "k3d-serverlb-keeper.py"), "--config", config],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, DOCKER_HOST=docker_host))
    # connected: it reads events from the moment before it first asks the engine, so a load balancer created from
    # now on is seen (bounded; however long a loaded machine takes to start it)
    deadline = time.time() + 60
    while "pid=%d," % proc.pid not in subprocess.run(
            ["ss", "-Htnp", "state", "established", "dst", docker_host.split("//")[1]], capture_output=True,
            text=True, check=False).stdout:
        assert proc.poll() is None and time.time() < deadline, open(os.path.join(tmp, "keeper.log")).read()
        time.sleep(0.2)
    return proc, os.path.join(tmp, "keeper.log")


def k3d_creates_a_load_balancer(client):
    """What k3d does before it starts one: create the container, copy values.yaml in."""
    c = client.containers.create(LB_IMAGE, name="k3d-d29-serverlb",
                                 labels={"k3d.role": "loadbalancer", "k3d.cluster": "d29"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("values.yaml")
        info.size = len(VALUES)
        tar.addfile(info, io.BytesIO(VALUES.encode()))
    c.put_archive("/etc/confd", buf.getvalue())
    return c


def template(c):
    """The confd template in a container that has not started (the archive API)."""
    stream, dummy = c.get_archive(k3d_container.TEMPLATE_PATH)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        return tar.extractfile(tar.getmembers()[0]).read().decode()


@pytest.mark.parametrize("old_events", [False, True], ids=["keeper", "keeper reading the old event shape"])
def test_the_keeper_patches_a_load_balancer_created_on_engine_29(engine, old_events):
    client, docker_host = engine
    tmp = tempfile.mkdtemp()
    proc, log = keeper(tmp, docker_host, old_events)
    try:
        c = k3d_creates_a_load_balancer(client)
        deadline = time.time() + 20
        while "proxy_responses 1;" not in template(c) and time.time() < deadline:
            time.sleep(0.5)
        text = open(log).read()
        if old_events:
            assert "proxy_responses 1;" not in template(c), text
            assert "KeyError" in text and "before its first render" not in text, text
        else:
            assert "proxy_responses 1;" in template(c) and k3d_template.is_patched(template(c)), text
            assert "created; template patched before its first render" in text, text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for name in ("k3d-d29-serverlb",):
            try:
                client.containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
