"""Healing that sees what users see (issue 54), on the NAS's real Traefik,
autoheal and socket proxy: two wedges that leave Traefik alive but dark to
users, each tried with the role's health check through the user's
entrypoint and with a ping-only one; the role's default intervals once; a
restart loop stopped by the guard and reported; a healer of the user's
already running, adopted (one healer) or refused.

The wedges, bounded and undone by the test itself:
- the entrypoint stalled: TCP to Traefik's :443 dropped inside Traefik's own
  network namespace (iptables there), while its :8080 (ping) answers - a
  stand-in for an entrypoint whose accept loop stalled. A restart clears it
  because the container gets a new network namespace.
- out of file descriptors: Traefik's own open-file limit lowered on the
  running process (prlimit) to what it holds plus 16, and a client holding
  80 connections to the entrypoint for 50 s: accept4 fails with EMFILE in a
  loop while the process runs (traefik issue #8904's shape). The limit is
  process-wide, so ping fails too; a restart starts a Traefik with the
  container's own limit.

Figures go to tests/output/nas.txt (adhoc.record). Each Traefik restart
the tests cause is on a container the role re-created just before (a new id
for the restart-loop guard, which counts restarts per container id)."""
import json
import shlex
import time

import pytest
from test_nas import CLIENT2, INVENTORY, NAS, inner, nas_ip, role, text, wait_health

import adhoc  # noqa: E402 (on the path test_nas sets)
import upstream_images  # noqa: E402

CONTAINER, PORT, INNER_PORT, HOST = "traefik-b", 9443, 443, "nas-b"
PROBE_PATH = "/homelab-edge-health"


def health_test(container=CONTAINER):
    return json.loads(inner("inspect", "-f", "'{{json .Config.Healthcheck.Test}}'", container))


def pid(container=CONTAINER):
    return inner("inspect", "-f", "{{.State.Pid}}", container).strip()


def started(container=CONTAINER):
    return inner("inspect", "-f", "{{.State.StartedAt}}", container).strip()


def stall(container=CONTAINER):
    NAS.check_output("nsenter -t %s -n iptables -I INPUT -p tcp --dport %d -j DROP" % (pid(container), INNER_PORT))


def unstall(container=CONTAINER):
    NAS.run("nsenter -t %s -n iptables -D INPUT -p tcp --dport %d -j DROP" % (pid(container), INNER_PORT))


def exhaust(container=CONTAINER, hold=50, connections=80):
    """Traefik's open-file limit to what it holds + 16; a client on client2 holding `connections` for `hold` s."""
    p = pid(container)
    held = int(NAS.check_output("ls /proc/%s/fd | wc -l" % p))
    NAS.check_output("prlimit --pid %s --nofile=%d:%d" % (p, held + 16, held + 16))
    script = ("import socket,time\nsocks=[]\nfor i in range(%d):\n s=socket.socket();s.settimeout(2)\n try:\n"
              "  s.connect(('%s',%d));socks.append(s)\n except OSError:\n  break\ntime.sleep(%d)\n"
              % (connections, nas_ip(), PORT, hold))
    CLIENT2.run("timeout %d python3 -c \"%s\" >/dev/null 2>&1 &" % (hold + 10, script))
    return held + 16


def served(port=PORT):
    """The site answered 200 through the entrypoint within 2 s (from client2, as a user)."""
    return CLIENT2.run("curl -sk -o /dev/null -w '%%{http_code}' -m 2 --resolve site.nas.lab:%d:%s "
                       "https://site.nas.lab:%d/" % (port, nas_ip(), port)).stdout.strip() == "200"


def watch(seconds, port=PORT, container=CONTAINER):
    """From now: when Docker said unhealthy, when Traefik was restarted and
    served the site again (None: not within `seconds`), and whether users were
    dark before that (a request that got no answer)."""
    before, t0 = started(container), time.time()
    out = {"unhealthy_after_s": None, "served_again_after_s": None, "users_dark": False}
    while time.time() - t0 < seconds:
        if out["unhealthy_after_s"] is None and inner(
                "inspect", "-f", "'{{if .State.Health}}{{.State.Health.Status}}{{end}}'", container).strip() == "unhealthy":
            out["unhealthy_after_s"] = round(time.time() - t0, 1)
        ok = served(port)
        out["users_dark"] = out["users_dark"] or not ok
        if ok and started(container) != before:
            out["served_again_after_s"] = round(time.time() - t0, 1)
            break
        time.sleep(0.5)
    out["restarted"] = started(container) != before
    # autoheal acts within its 2 s pass: the unhealthy state may come and go between two readings above
    log = NAS.check_output("docker logs --since %ds autoheal 2>&1" % (int(time.time() - t0) + 5))
    out["restarted_by_autoheal"] = "Container /%s" % container in log and "found to be unhealthy" in log
    return out


def set_check(extra=None):
    out = role(HOST, extra or {})
    assert out.returncode == 0, out.stdout[-3000:]
    assert wait_health(CONTAINER, "healthy", 90) is not None, "%s never healthy" % CONTAINER
    return out


@pytest.fixture
def ping_only():
    set_check({"traefik_inflight_healthcheck_through": "ping"})
    assert health_test()[:3] == ["CMD", "traefik", "healthcheck"]
    yield
    unstall()
    set_check()


def test_the_role_s_check_asks_through_the_users_entrypoint():
    test = health_test()
    assert test[0] == "CMD-SHELL" and "https://127.0.0.1:443%s" % PROBE_PATH in test[1], test
    # it passes while Traefik serves: Traefik answers it (404: no router of theirs matches the path)
    assert NAS.run("docker exec %s sh -c %s" % (CONTAINER, shlex.quote(test[1]))).rc == 0
    out = NAS.run("docker exec %s wget -q -S -O /dev/null --no-check-certificate https://127.0.0.1:443%s"
                  % (CONTAINER, PROBE_PATH))
    assert "404 Not Found" in out.stderr + out.stdout


@upstream_images.needs("autoheal")
def test_a_stalled_entrypoint_is_healed_by_the_check_through_it():
    assert wait_health(CONTAINER, "healthy", 60) is not None
    stall()
    try:
        got = watch(60)
    finally:
        unstall()
    adhoc.record("nas", "stalled_entrypoint_check_through_it", **got)
    assert got["users_dark"] and got["restarted_by_autoheal"], got
    assert got["restarted"] and got["served_again_after_s"] is not None, got


@upstream_images.needs("autoheal")
def test_the_same_stall_is_not_healed_by_a_ping_only_check(ping_only):
    stall()
    got = watch(25)
    adhoc.record("nas", "stalled_entrypoint_ping_only", **got)
    # users dark, Docker sees nothing, nobody restarts Traefik
    assert got["users_dark"] and got["unhealthy_after_s"] is None and not got["restarted"], got
    assert not got["restarted_by_autoheal"], got
    unstall()
    assert served(PORT)


@upstream_images.needs("autoheal")
@pytest.mark.parametrize("through", ["entrypoint", "ping"])
def test_file_descriptor_exhaustion_is_healed(through):
    set_check({"traefik_inflight_healthcheck_through": through})
    try:
        limit = exhaust()
        got = watch(60)
        logs = inner("logs", "--since", "90s", CONTAINER, "2>&1")
        adhoc.record("nas", "emfile_%s" % through, limit=limit, emfile_logged="too many open files" in logs, **got)
        assert "too many open files" in logs
        # the limit is the process's: ping's listener is out of descriptors too, so both checks see it
        assert got["users_dark"] and got["restarted_by_autoheal"] and got["served_again_after_s"] is not None, got
    finally:
        set_check()


@upstream_images.needs("autoheal")
def test_the_role_s_default_intervals_heal_a_stalled_entrypoint():
    set_check({"traefik_inflight_healthcheck": {"interval": "30s", "timeout": "5s", "retries": 3,
                                                "start_period": "20s"}})
    try:
        stall()
        got = watch(200)
        adhoc.record("nas", "stalled_entrypoint_default_intervals", **got)
        assert got["restarted_by_autoheal"] and got["served_again_after_s"] is not None, got
    finally:
        unstall()
        set_check()


def autoheal_role(extra=None):
    return adhoc.playbook(INVENTORY, "- hosts: nas-a\n  gather_facts: false\n  become: true\n"
                                     "  roles: [homelab.edge.autoheal]\n", "-e", json.dumps(extra or {}))


@upstream_images.needs("autoheal")
def test_a_restart_loop_is_stopped_by_the_guard_and_reported():
    """A container whose check never passes, watched by autoheal: restarted
    autoheal_restart_limit (3) times, then the socket proxy refuses the next
    restart (429), autoheal logs the failure, and host_signals (what
    diagnose reads) names the loop and its likely cause."""
    inner("run", "-d", "--name", "looper", "--label", "autoheal=true", "--health-cmd", "'wget -q http://example.com'",
          "--health-interval", "1s", "--health-retries", "1", "homelab-edge/client:lab", "sleep", "infinity")
    try:
        t0, log = time.time(), ""
        while time.time() - t0 < 90:
            log = NAS.check_output("docker logs --since 3m autoheal 2>&1")
            if "failed" in log and "/looper" in log:
                break
            time.sleep(2)
        restarts = log.count("Container /looper")
        refused = log.count("failed")
        adhoc.record("nas", "restart_loop", restarts_tried=restarts, refused=refused, seconds=round(time.time() - t0))
        assert restarts >= 4 and refused >= 1, log[-2000:]
        # the 3 allowed restarts happened; no more went through
        time.sleep(5)
        assert int(inner("inspect", "-f", "{{.RestartCount}}", "looper") or 0) == 0  # restarts by the API, not a policy
        signals = adhoc.run_module("host_signals", {"autoheal": "autoheal", "window": 300}, target="nas-a",
                                   inventory=INVENTORY, become=True)
        loops = dict((x["name"], x) for x in signals["autoheal"]["loops"])
        assert "looper" in loops and "internet" in loops["looper"]["cause"], signals["autoheal"]
    finally:
        inner("rm", "-f", "looper")


@upstream_images.needs("autoheal")
def test_a_healer_already_running_is_adopted_or_refused_never_two():
    """Seed 001's compose snippet, already up: autoheal as <project>-autoheal-1 on the label autoheal."""
    inner("run", "-d", "--name", "seed-autoheal-1", "--label", "com.docker.compose.project=seed",
          "--label", "com.docker.compose.service=autoheal", "-e", "AUTOHEAL_CONTAINER_LABEL=autoheal",
          "-e", "AUTOHEAL_INTERVAL=5", "-v", "/var/run/docker.sock:/var/run/docker.sock", "homelab-edge/autoheal:lab")
    try:
        out = autoheal_role({"autoheal_existing": "refuse"})
        t = text(out)
        assert out.returncode != 0 and "seed-autoheal-1 (" in t and "already heals containers on this host" in t, t[-2000:]
        assert "autoheal" in inner("ps", "--format", "'{{.Names}}'").split()  # nothing changed: ours still runs
        out = autoheal_role()
        t = text(out)
        assert out.returncode == 0 and "adopted seed-autoheal-1" in t, t[-2000:]
        running = inner("ps", "--format", "'{{.Names}} {{.Image}}'").splitlines()
        healers = [r.split()[0] for r in running if "autoheal" in r.split()[1]]
        assert healers == ["seed-autoheal-1"], running
    finally:
        inner("rm", "-f", "seed-autoheal-1")
        out = autoheal_role()
        assert out.returncode == 0, out.stdout[-2000:]
        assert "autoheal" in inner("ps", "--format", "'{{.Names}}'").split()
