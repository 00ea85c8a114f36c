"""The NAS as its admin runs it: five hand-written Traefiks (v3 with a
provider file, v2 with a provider directory, v3 with flags, v3 with the Docker
provider and labels and traefik.yml mounted alone at /traefik.yml beside a :8080
entrypoint of theirs and .env, v2 with TOML),
changed in place by the role over SSH with sudo; the real autoheal and socket proxy against a
real wedge. The NAS is read from outside (its console: docker exec)."""
import base64
import difflib
import json
import os
import sys
import time

import docker
import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import hosts  # noqa: E402
import probes  # noqa: E402
import upstream_images  # noqa: E402

USER = os.path.join(ROOT, "lab", "user-configs", "nas")
NAS = testinfra.get_host("docker://nas-lab")
CLIENT2 = testinfra.get_host("docker://nas-client2")
INVENTORY = adhoc.molecule_inventory()
# inventory host, container, port on the NAS, the user's files (repo path, path on the NAS)
VARIANTS = {
    "nas-a": ("traefik-a", 443, [("filename/config/traefik.yml", "/srv/traefik-a/config/traefik.yml"),
                                 ("filename/config/dynamic.yml", "/srv/traefik-a/config/dynamic/dynamic.yml")]),
    "nas-b": ("traefik-b", 9443, [("directory/config/traefik.yml", "/srv/traefik-b/config/traefik.yml"),
                                  ("directory/config/dynamic/routes.yml", "/srv/traefik-b/config/dynamic/routes.yml"),
                                  ("directory/config/dynamic/middlewares.yml",
                                   "/srv/traefik-b/config/dynamic/middlewares.yml")]),
    "nas-c": ("traefik-c", 10443, [("flags/compose.yml", "/srv/traefik-c/compose.yml"),
                                   ("flags/dynamic/routes.yml", "/srv/traefik-c/dynamic/routes.yml")]),
    "nas-d": ("traefik-d", 11443, [("docker/traefik.yml", "/srv/traefik-d/traefik.yml"),
                                   ("docker/compose.yml", "/srv/traefik-d/compose.yml"),
                                   ("docker/config.yml", "/srv/traefik-d/config.yml"),
                                   ("docker/.env", "/srv/traefik-d/.env")]),
    "nas-e": ("traefik-e", 12443, [("toml/traefik.toml", "/srv/traefik-e/traefik.toml"),
                                   ("toml/dynamic/routes.toml", "/srv/traefik-e/dynamic/routes.toml"),
                                   ("toml/compose.yml", "/srv/traefik-e/compose.yml")]),
}
PROJECTS = " ".join("/srv/%s" % v[0] for v in VARIANTS.values())


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def nas_ip():
    return hosts.address("nas-lab", "homelab-nas")


def get(port, name, path="/"):
    """(status, headers, body) of https://<name>.nas.lab:<port><path> from client2."""
    out = CLIENT2.run("curl -sk -i -m 10 --resolve %s.nas.lab:%d:%s https://%s.nas.lab:%d%s"
                      % (name, port, nas_ip(), name, port, path))
    head, dummy, body = out.stdout.replace("\r\n", "\n").partition("\n\n")
    lines = head.split("\n")
    status = int(lines[0].split()[1]) if lines and lines[0].startswith("HTTP/") else None
    headers = dict(ln.split(": ", 1) for ln in lines[1:] if ": " in ln)
    return status, dict((k.lower(), v) for k, v in headers.items()), body


def inner(*argv):
    """docker inside the NAS."""
    return NAS.check_output("docker " + " ".join(argv))


def role(host, extra=None, check=False, diff=False):
    args = ["-l", host, "-e", json.dumps(extra or {})] + (["--check"] if check else []) + (["--diff"] if diff else [])
    return adhoc.playbook(INVENTORY, "- hosts: nas\n  gather_facts: false\n  become: true\n"
                                     "  roles: [homelab.edge.traefik_inflight]\n", *args)


def text(out):
    return " ".join(out.stdout.split())  # folded lines joined


def nas_files():
    """Every file of every user's Traefik project, as it is now (content and links)."""
    return NAS.check_output("find %s ! -name '*~' -type f -o -type l | sort "
                            "| xargs -r sh -c 'for f; do echo \"== $f $(readlink $f)\"; cat $f; done' x" % PROJECTS)


@pytest.mark.parametrize("host", sorted(VARIANTS))
def test_every_route_answers_as_before_with_the_users_headers(host):
    port = VARIANTS[host][1]
    for name in ("site", "auth"):
        status, headers, body = get(port, name)
        assert status == 200 and body.strip() == "%s ok" % name, (status, body)
        assert headers.get("x-lab-owner") == "the admin"


@pytest.mark.parametrize("host", sorted(VARIANTS))
def test_nothing_of_theirs_is_lost(host):
    """Each of the user's files: every line they wrote is still there, in
    order, comments included; the only lines that changed are the one
    provider line (filename -> directory); the rest are additions."""
    for repo, path in VARIANTS[host][2]:
        theirs = open(os.path.join(USER, repo)).read().splitlines()
        now = NAS.file(path).content_string.splitlines()
        removed = [ln[1:] for ln in difflib.unified_diff(theirs, now, lineterm="", n=0)
                   if ln.startswith("-") and not ln.startswith("---")]
        assert removed in ([], ["    filename: /etc/traefik/dynamic.yml"], ["    filename: /config.yml"]), (path, removed)
        assert [ln for ln in theirs if ln.lstrip().startswith("#")] == [ln for ln in now if ln.lstrip().startswith("#")]


def test_the_single_provider_file_moved_into_the_directory_and_is_linked_back():
    assert NAS.file("/srv/traefik-a/config/dynamic.yml").linked_to == "/srv/traefik-a/config/dynamic/dynamic.yml"
    assert NAS.file("/srv/traefik-a/config/dynamic/dynamic.yml").content_string == \
        open(os.path.join(USER, "filename/config/dynamic.yml")).read()


def test_each_traefik_runs_the_middleware_per_client_ip_in_its_own_version():
    for host, (container, port, dummy) in VARIANTS.items():
        version = inner("exec", container, "traefik", "version")
        assert ("Version:      2.11" in version) == (host in ("nas-b", "nas-e"))
        provider = "docker" if host == "nas-d" else "file"
        routers = json.loads(inner("exec", container, "wget", "-q", "-O", "-", "http://127.0.0.1:9099/api/http/routers"))
        # (a router without entryPoints is split by Traefik into websecure-<name>, which gets the
        # entrypoint's middlewares, and <name> for the other entrypoints: here the role's loopback API one)
        public = [r for r in routers if "websecure" in r["using"]]
        assert sorted(r["name"].replace("websecure-", "") for r in public) == ["auth@" + provider, "site@" + provider]
        assert all(r["status"] == "enabled" and r["middlewares"][0] == "inflight-limit@file" for r in public)
    mw = json.loads(inner("exec", "traefik-b", "wget", "-q", "-O", "-",
                          "http://127.0.0.1:9099/api/http/middlewares/inflight-limit@file"))
    assert mw["inFlightReq"]["amount"] == 400 and mw["inFlightReq"]["sourceCriterion"] == {"ipStrategy": {}}


def backend_active():
    """Requests the site's nginx is answering right now (stub_status
    "Writing"; its idle keep-alive connections from Traefik are not counted)."""
    out = NAS.check_output("docker exec site curl -s -m 3 http://127.0.0.1:8080/status")
    return int(out.split("Writing:")[1].split()[0]) - 1  # the status request itself


@pytest.mark.parametrize("host, n", [("nas-a", 500), ("nas-b", 450), ("nas-d", 450), ("nas-e", 420)])
def test_a_flood_from_one_address_gets_429_beyond_the_amount_while_another_is_served(client, host, n):
    dummy, port, dummy2 = VARIANTS[host]
    flood = probes.https_flood(client.containers.get("nas-client1"), nas_ip(), "/slower", n, port, "site.nas.lab")
    flood.started()  # connections made, requests sent: in flight for 6 s
    t0, active = time.time(), 0
    while time.time() - t0 < 3:  # the most the backend held at once in the first half of it
        active = max(active, backend_active())
    second = [get(port, "auth")[0] for dummy in range(3)]
    counts = flood.result()
    adhoc.record("nas", "flood_%s" % host, backend_active=active, second_client=second, **counts)
    assert counts.get("200") == 400 and counts.get("429") == n - 400, counts
    assert active <= 400
    assert second == [200] * 3


def test_a_dynamic_change_is_live_and_does_not_restart(client):
    started = inner("inspect", "-f", "{{.State.StartedAt}}", "traefik-a")
    out = role("nas-a", {"traefik_inflight_amount": 5})
    assert out.returncode == 0, out.stdout[-3000:]
    counts = probes.https_flood(client.containers.get("nas-client1"), nas_ip(), "/slow", 20, 443,
                                "site.nas.lab").result()
    assert inner("inspect", "-f", "{{.State.StartedAt}}", "traefik-a") == started
    out = role("nas-a")
    assert out.returncode == 0, out.stdout[-3000:]
    adhoc.record("nas", "amount5", **counts)
    assert counts.get("200") == 5 and counts.get("429") == 15


def test_check_mode_and_diff_show_the_change_and_make_none():
    before = nas_files()
    out = role("nas-a", {"traefik_inflight_amount": 50}, check=True, diff=True)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "-        amount: 400" in out.stdout and "+        amount: 50" in out.stdout
    assert "changed=1" in out.stdout or "changed=2" in out.stdout
    assert nas_files() == before


@pytest.mark.parametrize("host, extra, words", [
    ("nas-a", {"traefik_inflight_entrypoints": ["nosuch"]}, "entrypoint(s) nosuch not defined"),
    ("nas-a", {"traefik_inflight_name": "lab-headers"}, "a middleware named lab-headers already exists"),
    ("nas-b", {"traefik_inflight_name": "secure-headers"}, "a middleware named secure-headers already exists"),
    ("nas-c", {"traefik_inflight_entrypoints": ["web"]}, "entrypoint web is not defined by the flags"),
    ("nas-a", {"traefik_inflight_amount": 0}, "traefik_inflight_amount must be >= 1"),
    ("nas-a", {"traefik_inflight_container": "nosuch"}, "No running container named nosuch"),
])
def test_bad_input_fails_clearly_and_changes_nothing(host, extra, words):
    before = nas_files()
    out = role(host, extra)
    assert out.returncode != 0 and words in text(out), text(out)[-2000:]
    assert nas_files() == before


def test_a_static_config_that_does_not_parse_changes_nothing():
    path = "/srv/traefik-b/config/traefik.yml"
    good = NAS.file(path).content_string
    try:
        NAS.check_output("printf 'entryPoints:\\n  websecure: [oops\\n' >> %s" % path)
        before = nas_files()
        out = role("nas-b", {"traefik_inflight_amount": 300})
        assert out.returncode != 0 and "does not parse as YAML" in text(out) and "nothing was changed" in text(out)
        assert nas_files() == before
    finally:
        NAS.check_output("cat > %s <<'EOF'\n%sEOF" % (path, good))


def test_traefik_started_by_docker_run_with_flags_gets_the_exact_flags_to_add():
    inner("run", "-d", "--name", "traefik-run", "--network", "web", "-v", "/srv/traefik-c/dynamic:/etc/traefik/dynamic",
          "homelab-edge/nas:lab", "--entrypoints.websecure.address=:443", "--providers.file.directory=/etc/traefik/dynamic")
    try:
        out = role("nas-c", {"traefik_inflight_container": "traefik-run"})
        t = text(out)
        assert out.returncode != 0 and "was started with docker run" in t
        assert "--entrypoints.websecure.http.middlewares=inflight-limit@file" in t and "--ping=true" in t
        assert "nothing was changed" in t
    finally:
        inner("rm", "-f", "traefik-run")


def test_a_dynamic_file_mounted_alone_is_refused_before_anything_changes():
    inner("run", "-d", "--name", "traefik-single", "--network", "web",
          "-v", "/srv/traefik-a/config/dynamic/dynamic.yml:/etc/traefik/dynamic.yml:ro",
          "homelab-edge/nas:lab", "--entrypoints.websecure.address=:443", "--providers.file.filename=/etc/traefik/dynamic.yml")
    try:
        before = nas_files()
        out = role("nas-c", {"traefik_inflight_container": "traefik-single"})
        # docker run: the role cannot add the directory mount it needs, and says so in docker run's terms
        t = text(out)
        assert out.returncode != 0 and "traefik-single reads its routes from /etc/traefik/dynamic.yml, a file " \
            "mounted alone" in t and "re-create it with that -v" in t, t[-1500:]
        assert nas_files() == before
    finally:
        inner("rm", "-f", "traefik-single")


@pytest.mark.parametrize("host", ["nas-a", "nas-d", "nas-e"])
def test_a_change_traefik_rejects_is_rolled_back_and_every_route_still_answers(host):
    """A change that passes every check before it is made, but that Traefik
    does not accept (an excluded IP that is no IP): its API shows the routers
    disabled; the role puts everything back and says why."""
    port = VARIANTS[host][1]
    before = nas_files()
    out = role(host, {"traefik_inflight_excluded_ips": ["not-an-ip"]})
    t = text(out)
    assert out.returncode != 0 and "The change was rolled back" in t, t[-3000:]
    assert "site@" in t or "inflight-limit@file" in t
    assert nas_files() == before
    # the file provider's watch: until each route answers (bounded)
    t0 = time.time()
    while time.time() - t0 < 60 and [get(port, name)[0] for name in ("site", "auth")] != [200, 200]:
        time.sleep(0.5)
    for name in ("site", "auth"):
        assert get(port, name)[0] == 200


def put_back_as_they_wrote_it(host):
    """The user's project as prepare.yml left it (their files only), Traefik re-created on it."""
    container, port, files = VARIANTS[host]
    project = "/srv/" + container
    inner("compose", "--project-directory", project, "-f", project + "/compose.yml", "down", "-t", "1")
    NAS.check_output("rm -rf %s/dynamic %s/config.yml" % (project, project) if host == "nas-d" else "true")
    for repo, path in files:
        with open(os.path.join(USER, repo), "rb") as f:
            # with the umask of the user's shell: `docker exec` starts with containerd's (0000 under an Engine 29 dockerd that started containerd itself)
            NAS.check_output("umask 022; echo %s | base64 -d > %s" % (base64.b64encode(f.read()).decode(), path))
    inner("compose", "--project-directory", project, "-f", project + "/compose.yml", "up", "-d")
    t0 = time.time()
    while time.time() - t0 < 30 and get(port, "site")[0] != 200:
        time.sleep(1)


def test_the_first_change_to_a_docker_provider_traefik_is_rolled_back_with_its_new_mount():
    """The whole first change (a directory mount and a file provider added,
    Traefik re-created from compose with its .env) rejected by Traefik: the
    compose file, traefik.yml and the mounts are as they were, re-created
    again, every label route answers."""
    put_back_as_they_wrote_it("nas-d")
    assert [get(11443, name)[0] for name in ("site", "auth")] == [200, 200]
    before = nas_files()
    out = role("nas-d", {"traefik_inflight_excluded_ips": ["not-an-ip"]})
    t = text(out)
    assert out.returncode != 0 and "The change was rolled back" in t, t[-3000:]
    assert nas_files() == before
    mounts = json.loads(inner("inspect", "-f", "'{{json .Mounts}}'", "traefik-d"))
    assert "/dynamic" not in [m["Destination"] for m in mounts]
    # re-created on the old files, Traefik's Docker provider finds the apps' labels again in a few seconds
    t0 = time.time()
    while time.time() - t0 < 30 and [get(11443, name)[0] for name in ("site", "auth")] != [200, 200]:
        time.sleep(1)
    assert [get(11443, name)[0] for name in ("site", "auth")] == [200, 200]
    out = role("nas-d")
    assert out.returncode == 0, text(out)[-3000:]


def test_the_docker_provider_traefik_reads_the_middleware_from_a_new_directory_mount_and_keeps_its_env():
    mounts = dict((m["Destination"], m["Source"]) for m in json.loads(
        inner("inspect", "-f", "'{{json .Mounts}}'", "traefik-d")))
    # traefik.yml at the working directory and config.yml mounted alone, as the guides mount them:
    # the directory goes beside config.yml, which moved into it (a link left for its own mount)
    assert mounts["/dynamic"] == "/srv/traefik-d/dynamic"
    assert mounts["/traefik.yml"] == "/srv/traefik-d/traefik.yml"
    assert NAS.file("/srv/traefik-d/config.yml").linked_to == "/srv/traefik-d/dynamic/config.yml"
    assert NAS.file("/srv/traefik-d/dynamic/config.yml").content_string == \
        open(os.path.join(USER, "docker/config.yml")).read()
    assert "    directory: /dynamic\n" in NAS.file("/srv/traefik-d/traefik.yml").content_string
    mws = json.loads(inner("exec", "traefik-d", "wget", "-q", "-O", "-", "http://127.0.0.1:9099/api/http/middlewares"))
    assert {"secure-headers@file", "inflight-limit@file"} <= set(m["name"] for m in mws)
    compose = NAS.file("/srv/traefik-d/compose.yml").content_string
    assert "    image: homelab-edge/nas:${NAS_TAG}   # stands for traefik:${TRAEFIK_VERSION}\n" in compose
    assert "      - ./dynamic:/dynamic:ro\n" in compose
    labels = json.loads(inner("inspect", "-f", "'{{json .Config.Labels}}'", "traefik-d"))
    assert labels["com.docker.compose.project"] == "traefik-d"
    assert inner("inspect", "-f", "{{.Config.Image}}", "traefik-d").strip() == "homelab-edge/nas:lab"


def test_ping_goes_on_the_roles_api_entrypoint_where_their_entrypoint_holds_8080():
    """traefik-d's own `web` listens on :8080, the address of Traefik's
    default entrypoint for ping: the role put ping on its own loopback API
    entrypoint, so Traefik started, :8080 is still theirs, and the health
    check (traefik healthcheck --ping) finds ping there."""
    static = NAS.file("/srv/traefik-d/traefik.yml").content_string
    assert "ping:\n  entryPoint: homelab-edge-api\n" in static
    eps = dict((e["name"], e["address"]) for e in json.loads(
        inner("exec", "traefik-d", "wget", "-q", "-O", "-", "http://127.0.0.1:9099/api/entrypoints")))
    assert eps["web"] == ":8080" and "traefik" not in eps
    said = inner("exec", "traefik-d", "traefik", "healthcheck", "--ping", "--configFile=/traefik.yml").strip()
    assert [ln for ln in said.splitlines() if ln.startswith("OK") and "9099/ping" in ln], said
    # an earlier test may have restarted traefik-d: its first health check runs one interval after start
    assert wait_health("traefik-d", "healthy", 60) is not None, \
        inner("inspect", "-f", "{{.State.Health.Status}}", "traefik-d")


def test_the_docker_provider_without_exposed_by_default_is_changed_too():
    """exposedByDefault left at Traefik's default (true): every container of the
    NAS becomes a router; the change keeps them all and limits each."""
    path = "/srv/traefik-d/traefik.yml"
    theirs = NAS.file(path).content_string
    try:
        NAS.check_output("sed -i '/exposedByDefault/d' %s && docker restart traefik-d" % path)
        out = role("nas-d", {"traefik_inflight_amount": 300})
        assert out.returncode == 0, text(out)[-3000:]
        routers = json.loads(inner("exec", "traefik-d", "wget", "-q", "-O", "-", "http://127.0.0.1:9099/api/http/routers"))
        public = [r for r in routers if "websecure" in r["using"]]
        assert len(public) > 2 and all(r["middlewares"][0] == "inflight-limit@file" for r in public)
        assert [get(11443, name)[0] for name in ("site", "auth")] == [200, 200]
    finally:
        NAS.check_output("cat > %s <<'EOF'\n%sEOF\ndocker restart traefik-d" % (path, theirs))
        assert role("nas-d").returncode == 0


def status_lines(host, extra=None):
    out = adhoc.playbook(INVENTORY, "- hosts: nas\n  gather_facts: false\n  become: true\n  tasks:\n"
                                    "    - ansible.builtin.include_role:\n        name: homelab.edge.traefik_inflight\n"
                                    "        tasks_from: status\n"
                                    "    - ansible.builtin.debug:\n        var: homelab_edge_status_lines\n",
                         "-l", host, "-e", json.dumps(extra or {}))
    assert out.returncode == 0, out.stdout[-2000:]
    return text(out)


def test_one_client_holds_the_amount_on_each_router_and_status_shows_the_bound(client):
    """inFlightReq is one limiter per router: amount 5, one client, 10 slow
    requests to each of two routers at once -> 5 x 200 + 5 x 429 on each,
    10 in flight in all; status says 5 x 2 routers."""
    out = role("nas-d", {"traefik_inflight_amount": 5})
    assert out.returncode == 0, text(out)[-3000:]
    try:
        c1 = client.containers.get("nas-client1")
        floods = [probes.https_flood(c1, nas_ip(), "/slow", 10, 11443, "%s.nas.lab" % name) for name in ("site", "auth")]
        counts = [f.result() for f in floods]
        adhoc.record("nas", "per_router", site=counts[0], auth=counts[1])
        assert all(c.get("200") == 5 and c.get("429") == 5 for c in counts), counts
        t = status_lines("nas-d", {"traefik_inflight_amount": 5})
        assert "10 in flight per client: 5 per router x 2 routers" in t
        t = status_lines("nas-d", {"traefik_inflight_amount": 5, "traefik_inflight_client_bound_max": 5})
        assert "above 5: inFlightReq is one limiter per router" in t
    finally:
        assert role("nas-d").returncode == 0


def h2_connections(client, streams):
    """One client, 30 slow requests at once over HTTP/2 (curl opens another
    connection when one is full): [(http version, status, connections made)]."""
    out = role("nas-d", {"traefik_inflight_http2_max_streams": streams})
    assert out.returncode == 0, text(out)[-3000:]
    urls = " ".join(["-o /dev/null https://site.nas.lab:11443/slow"] * 30)
    c2 = client.containers.get("nas-client2")
    rc, out = c2.exec_run(["sh", "-c", "curl -sk --http2 --parallel --parallel-max 30 --resolve site.nas.lab:11443:%s "
                                       "-w '%%{http_version} %%{http_code} %%{num_connects}\\n' %s 2>/dev/null"
                           % (nas_ip(), urls)])
    return [tuple(ln.split()) for ln in out.decode().splitlines() if ln.strip()]


def test_http2_streams_bound_what_one_connection_carries(client):
    """streams 8: 30 requests at once need at least 4 connections (which the
    VPS's per-IP limit counts); Traefik's own 250: one connection carries all."""
    try:
        capped = h2_connections(client, 8)
        free = h2_connections(client, 250)   # Traefik's own default: the net removed
        connections = [sum(int(r[2]) for r in rows) for rows in (capped, free)]
        adhoc.record("nas", "http2_streams", connections_at_8=connections[0], connections_at_250=connections[1])
        assert [r[:2] for r in capped + free] == [("2", "200")] * 60
        assert connections[0] >= 4 and connections[1] == 1, connections
    finally:
        assert role("nas-d").returncode == 0


def wait_health(container, status, seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        if inner("inspect", "-f", "'{{if .State.Health}}{{.State.Health.Status}}{{end}}'", container).strip() == status:
            return round(time.time() - t0, 1)
        time.sleep(0.5)
    return None


def served(port=443):
    return get(port, "site")[0] == 200


def wedge_and_heal(container, port, seconds=90):
    """SIGSTOP Traefik: it stays running, answers nothing. Seconds until it
    turned unhealthy, was restarted, and served again (None: not in time)."""
    started = inner("inspect", "-f", "{{.State.StartedAt}}", container)
    t0 = time.time()
    inner("kill", "-s", "STOP", container)
    unhealthy = wait_health(container, "unhealthy", seconds)
    healed = None
    while time.time() - t0 < seconds:
        if inner("inspect", "-f", "{{.State.StartedAt}}", container) != started and served(port):
            healed = round(time.time() - t0, 1)
            break
        time.sleep(0.5)
    if healed is None:
        NAS.run("docker kill -s CONT %s" % container)
    log = NAS.check_output("docker logs autoheal 2>&1 | tail -n 20")
    return {"unhealthy_after_s": unhealthy, "served_again_after_s": healed,
            "restarted_by_autoheal": "Container /%s" % container in log and "found to be unhealthy" in log}


@upstream_images.needs("autoheal")
def test_autoheal_heals_a_wedged_traefik_through_the_socket_proxy():
    assert wait_health("traefik-a", "healthy", 30) is not None
    figures = wedge_and_heal("traefik-a", 443)
    adhoc.record("nas", "wedge_through_proxy", **figures)
    assert figures["unhealthy_after_s"] is not None
    assert figures["served_again_after_s"] is not None and figures["restarted_by_autoheal"]


def proxy(method, path):
    """HTTP status of a Docker API call through autoheal's socket proxy,
    from a container on the proxy's network."""
    net = inner("inspect", "-f", "'{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}'", "autoheal").strip()
    return NAS.check_output("docker run --rm --network %s homelab-edge/client:lab curl -s -o /dev/null -w '%%{http_code}' "
                            "-X %s http://socket-proxy:2375%s" % (net, method, path))


@upstream_images.needs("autoheal")
def test_the_socket_proxy_allows_listing_and_restarting_only():
    assert proxy("GET", "/containers/json") == "200"
    assert proxy("GET", "/v1.41/containers/json?filters=%7B%7D") == "200"
    assert proxy("POST", "/containers/site/restart") == "204"
    for method, path in (("POST", "/containers/create"), ("POST", "/containers/site/exec"), ("POST", "/exec/x/start"),
                         ("GET", "/containers/site/json"), ("DELETE", "/containers/site"), ("POST", "/containers/site/kill"),
                         ("GET", "/images/json"), ("POST", "/containers/site/stop"), ("GET", "/info"),
                         ("POST", "/containers/site/start"), ("POST", "/containers/site/update"),
                         ("POST", "/containers/site/pause"), ("POST", "/containers/site/unpause")):
        assert proxy(method, path) == "403", (method, path)


@upstream_images.needs("autoheal")
def test_upstreams_own_policy_refuses_the_restart_autoheal_needs():
    """The net, removed: Tecnativa's v0.3.0 haproxy.cfg with POST=0 refuses
    POST /containers/<id>/restart even with ALLOW_RESTARTS=1."""
    net = inner("inspect", "-f", "'{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}'", "autoheal").strip()
    inner("run", "-d", "--name", "stock-proxy", "--network", net, "-e", "CONTAINERS=1", "-e", "ALLOW_RESTARTS=1",
          "-e", "POST=0", "-e", "DISABLE_IPV6=1", "-v", "/var/run/docker.sock:/var/run/docker.sock:ro",
          "homelab-edge/socket-proxy:lab")
    try:
        t0, code = time.time(), "000"
        while code == "000" and time.time() - t0 < 60:  # until the proxy answers at all (curl: 000)
            code = NAS.run("docker run --rm --network %s homelab-edge/client:lab curl -s -o /dev/null -w "
                           "'%%{http_code}' -X POST http://stock-proxy:2375/containers/site/restart" % net).stdout.strip()
        assert code == "403"
    finally:
        inner("rm", "-f", "stock-proxy")


@upstream_images.needs("autoheal")
def test_autoheal_on_the_raw_socket_heals_the_wedge_too():
    out = adhoc.playbook(INVENTORY, "- hosts: nas-a\n  gather_facts: false\n  become: true\n"
                                    "  roles: [homelab.edge.autoheal]\n", "-e", '{"autoheal_socket_proxy": false}')
    assert out.returncode == 0, out.stdout[-2000:]
    try:
        assert wait_health("traefik-c", "healthy", 30) is not None
        figures = wedge_and_heal("traefik-c", 10443)
        adhoc.record("nas", "wedge_raw_socket", **figures)
        assert figures["served_again_after_s"] is not None and figures["restarted_by_autoheal"]
    finally:
        out = adhoc.playbook(INVENTORY, "- hosts: nas-a\n  gather_facts: false\n  become: true\n"
                                        "  roles: [homelab.edge.autoheal]\n")
        assert out.returncode == 0


@upstream_images.needs("autoheal")
def test_a_watched_container_autoheal_cannot_heal_is_reported():
    inner("run", "-d", "--name", "nohealth", "--label", "autoheal=true", "homelab-edge/client:lab", "sleep", "infinity")
    inner("run", "-d", "--name", "alwayshealthy", "--label", "autoheal=true", "--health-cmd", "'curl -s x || true'",
          "homelab-edge/client:lab", "sleep", "infinity")
    try:
        out = adhoc.playbook(INVENTORY, "- hosts: nas-a\n  gather_facts: false\n  become: true\n"
                                        "  roles: [homelab.edge.autoheal]\n",
                             "-e", json.dumps({"autoheal_watched": ["traefik-a", "nohealth", "alwayshealthy"]}))
        t = text(out)
        assert out.returncode == 0
        assert "nohealth has no health check" in t and "alwayshealthy has a health check that cannot fail" in t
        assert "traefik-a" not in t.split("Warn about each")[1].split("PLAY RECAP")[0]
    finally:
        inner("rm", "-f", "nohealth", "alwayshealthy")


# ---------------------------------------------------------------- undo (last: it takes the role out)

SOURCES = {"traefik-a": "filename", "traefik-b": "directory", "traefik-c": "flags", "traefik-d": "docker",
           "traefik-e": "toml"}


def project(container):
    """{path under the project: (mode, content)} of every file and link, as on the NAS now."""
    out = NAS.check_output("cd /srv/%s && find . \\( -type f -o -type l \\) | sort | while read -r f; do "
                           "printf '== %%s %%s %%s\\n' \"$f\" \"$(stat -c %%a \"$f\")\" \"$(readlink \"$f\")\"; "
                           "[ -L \"$f\" ] || base64 -w0 \"$f\"; echo; done" % container)
    lines = out.split("\n")
    found = {}
    for head, body in zip(lines[0::2], lines[1::2]):
        dummy, path, mode, link = (head.split(" ") + [""])[:4]
        found[path[2:]] = (mode, link or base64.b64decode(body))
    return found


def as_they_wrote_it(container):
    """The same, of the user's project in the repository (what prepare.yml copied)."""
    top = os.path.join(USER, SOURCES[container])
    found = {}
    for d, dummy, names in os.walk(top):
        for name in names:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, top)] = ("%o" % (os.stat(path).st_mode & 0o777), f.read())
    return found


def absent(host, **extra):
    return role(host, dict(extra, traefik_inflight_state="absent"))


def test_absent_refuses_a_file_changed_since_the_role_wrote_it_and_changes_nothing():
    path = "/srv/traefik-b/config/traefik.yml"
    theirs = NAS.file(path).content_string
    NAS.check_output("echo '# added by hand' >> %s" % path)
    try:
        before = nas_files()
        out = absent("nas-b")
        t = text(out)
        assert out.returncode != 0 and "%s changed since homelab.edge.traefik_inflight wrote it" % path in t, t[-3000:]
        assert "nothing was changed" in t and nas_files() == before
    finally:
        NAS.check_output("cat > %s <<'EOF'\n%sEOF" % (path, theirs))


@pytest.mark.parametrize("host", sorted(VARIANTS))
def test_absent_puts_back_every_file_as_they_wrote_it_and_traefik_runs_on_them(host):
    """present (converge, then every test above), then absent: the project
    directory is byte for byte the user's, with their modes, nothing added
    (no middleware file, directory or link), Traefik runs their config
    (no middleware on the routers) and every route answers."""
    container, port, dummy = VARIANTS[host]
    out = absent(host)
    assert out.returncode == 0, text(out)[-3000:]
    assert project(container) == as_they_wrote_it(container)
    t0 = time.time()
    while time.time() - t0 < 30 and [get(port, name)[0] for name in ("site", "auth")] != [200, 200]:
        time.sleep(1)
    assert [get(port, name)[0] for name in ("site", "auth")] == [200, 200]
    assert "inflight-limit@file" not in inner("inspect", "-f", "'{{json .Args}}'", container)
    again = absent(host)
    assert again.returncode == 0 and "changed=0" in again.stdout.split("PLAY RECAP")[1], text(again)[-2000:]


@upstream_images.needs("autoheal")
def test_autoheal_absent_removes_it_and_what_the_role_wrote_only():
    out = adhoc.playbook(INVENTORY, "- hosts: nas-a\n  gather_facts: false\n  become: true\n"
                                    "  roles: [homelab.edge.autoheal]\n", "-e", "autoheal_state=absent")
    assert out.returncode == 0, text(out)[-3000:]
    assert not NAS.file("/srv/autoheal").exists
    names = inner("ps", "-a", "--format", "{{.Names}}").split()
    assert not [n for n in names if "autoheal" in n or "socket-proxy" in n], names
    assert sorted(n for n in names if n.startswith("traefik-")) == sorted(SOURCES)
