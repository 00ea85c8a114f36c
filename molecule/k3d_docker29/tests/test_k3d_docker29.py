"""k3d on Docker Engine 29 in a host booted by systemd (issue 32).

The host (lab/hosts.py up --systemd --docker) runs dockerd v2.0.0-beta.24
(the Engine 29 line, API 1.56), containerd 2.2 and runc 1.3, enabled and
started by systemd from the units moby and containerd ship - neither sets
LimitNOFILE, so the engine and its containers get systemd's limits. On this
machine the outer container's hard limit of 20000 open files bounds what
systemd can give (a real Ubuntu 24.04 or Debian 12 host gives 524288): a
stock load balancer here starts at soft 1024, hard 20000.

The user's cluster d29 exists before the role; d29b is created after it,
and the keeper (a systemd unit here, as on every real host) must fix it
alone, reading Engine 29's events (no `id`, no `status`). Everything is read
from inside the host, as its admin would: docker, nginx -T, /proc, journalctl."""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import k3d  # noqa: E402

HOST = "k3d29"
BASE, BASE_B, BASE_S = 30000, 30100, 30200
WANT_NOFILE = 16384  # the role's k3d_serverlb_worker_rlimit_nofile (its default)
KEEPER_UNIT = "homelab-edge-k3d-keeper.service"


def host(command, check=True, timeout=120):
    out = subprocess.run(["docker", "exec", HOST, "sh", "-c", command], capture_output=True, text=True,
                         timeout=timeout, check=False)
    if check and out.returncode:
        raise AssertionError("%s (rc %d): %s%s" % (command, out.returncode, out.stdout[-2000:], out.stderr[-2000:]))
    return out.stdout


def in_lb(cluster, command, check=True):
    return host("docker exec %s sh -c '%s'" % (k3d.lb_name(cluster), command), check=check)


def worker_limits(cluster):
    """(soft, hard) open files of each nginx worker of the cluster's load balancer (not those shutting down
    after a reload)."""
    out = in_lb(cluster, 'for p in $(pgrep -f "nginx: worker process$"); do grep "open files" /proc/$p/limits 2>/dev/null; done')
    return sorted({(int(ln.split()[3]), int(ln.split()[4])) for ln in out.splitlines() if ln.strip()})


def engine_hard_limit():
    """The open files hard limit systemd gave the engine (containerd's process, as measured)."""
    return int(host("grep 'open files' /proc/$(pidof containerd)/limits").split()[4])


def nginx_config(cluster):
    return in_lb(cluster, "nginx -T 2>/dev/null")


def fixed_in_nginx(text):
    return "proxy_responses 1;" in text and "proxy_timeout 5s;" in text


def wait(what, test, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if test():
                return
        except AssertionError:
            pass
        time.sleep(1)
    raise AssertionError("%s: not after %d s" % (what, timeout))


def serving(cluster):
    return host("docker inspect -f '{{.State.Running}}' %s" % k3d.lb_name(cluster), check=False).strip() == "true" \
        and in_lb(cluster, 'pgrep -f "nginx: worker"', check=False).strip() != ""


def module(clusters, check=False):
    res = adhoc.run_module("k3d_serverlb", {"clusters": clusters}, target=HOST, check=check, become=True,
                           inventory=adhoc.molecule_inventory())
    assert not res.get("failed"), res.get("msg")
    return res


def test_the_engine_is_29_with_containerd_2_and_runc_1_3_started_by_systemd():
    v = json.loads(host("docker version --format '{{json .Server}}'"))
    assert v["Version"] == "v2.0.0-beta.24" and v["ApiVersion"] == "1.56", v
    components = {c["Name"]: c["Version"] for c in v["Components"]}
    assert components["containerd"] == "v2.2.9" and components["runc"] == "1.3.7", components
    assert host("systemctl is-active containerd.service docker.service").split() == ["active", "active"]
    # the units as the projects ship them: no LimitNOFILE, so systemd's default applies
    assert "LimitNOFILE" not in host("cat /etc/systemd/system/docker.service /etc/systemd/system/containerd.service")


def test_a_stock_load_balancer_gets_systemds_limits_and_is_not_capped():
    """k3d's own load balancer, untouched by the role (d29s is not in its list)."""
    k3d.create("d29s", BASE_S, host=HOST)
    try:
        wait("d29s serving", lambda: serving("d29s"))
        limits = worker_limits("d29s")
        hard = engine_hard_limit()
        assert limits == [(1024, hard)], (limits, hard)
        assert hard >= WANT_NOFILE  # so nginx can raise itself: the fix needs no cap here
        res = module(["d29s"], check=True)
        entry = res["load_balancers"][0]
        assert res["changed"] and entry["open_file_cap"] is None, entry
    finally:
        k3d.delete("d29s", host=HOST)


def test_the_role_fixed_the_users_load_balancer_in_full():
    res = module(["d29"], check=True)
    entry = res["load_balancers"][0]
    assert not res["changed"] and entry["state"] == "fixed" and entry["state_text"] == "fixed", entry
    assert fixed_in_nginx(nginx_config("d29"))
    assert worker_limits("d29") == [(WANT_NOFILE, WANT_NOFILE)]  # worker_rlimit_nofile sets both


def test_the_keeper_runs_under_systemd_and_fixes_a_cluster_created_after_the_role():
    assert host("systemctl is-active %s" % KEEPER_UNIT).strip() == "active"
    since = host("date '+%Y-%m-%d %H:%M:%S'").strip()
    k3d.create("d29b", BASE_B, host=HOST)
    wait("d29b serving", lambda: serving("d29b"))
    wait("d29b fixed by the keeper", lambda: fixed_in_nginx(nginx_config("d29b")), timeout=60)
    journal = host("journalctl -u %s --since '%s' --no-pager" % (KEEPER_UNIT, since))
    assert "k3d-d29b-serverlb" in journal and "created; template patched before its first render" in journal, journal
    assert "KeyError" not in journal, journal
    entry = module(["d29b"], check=True)["load_balancers"][0]
    assert entry["state"] == "fixed", entry


def test_dns_through_the_fixed_load_balancer_answers_every_query():
    """A fresh source port per query (each a new UDP session), from inside the host."""
    host("mkdir -p /tmp/hle")
    for f in ("dnsgen.py", "probes.py"):
        subprocess.run(["docker", "cp", os.path.join(ROOT, "tests", "support", f), "%s:/tmp/hle/%s" % (HOST, f)],
                       check=True, capture_output=True)
    since = int(time.time()) - 1
    r = json.loads(host("cd /tmp/hle && python3 -c 'import dnsgen, json; "
                        "print(json.dumps(dnsgen.run(\"127.0.0.1\", [%d], 300, 10)))'" % (BASE + 53), timeout=60))
    adhoc.record("k3d_docker29", "dns_through_the_fixed_lb", **{k: r[k] for k in ("rate", "planned", "sent", "answered", "send_errors", "valid")})
    assert r["valid"], r
    assert r["answered"] == r["sent"] == r["planned"], r
    logs = host("docker logs --since %d %s 2>&1" % (since, k3d.lb_name("d29")))
    assert "not enough" not in logs and "exceed open file resource limit" not in logs, logs[-2000:]


def test_an_engine_restart_keeps_the_fix_and_the_keeper():
    host("systemctl restart docker.service", timeout=180)
    for cluster in ("d29", "d29b"):
        wait("%s serving after the engine restart" % cluster, lambda c=cluster: serving(c), timeout=120)
        assert fixed_in_nginx(nginx_config(cluster)), cluster
        wait("%s's workers at the fix's limit" % cluster,
             lambda c=cluster: worker_limits(c) == [(WANT_NOFILE, WANT_NOFILE)], timeout=30)
    wait("the keeper active again", lambda: host("systemctl is-active %s" % KEEPER_UNIT, check=False).strip() == "active")
    res = module(["d29", "d29b"], check=True)
    assert not res["changed"] and [e["state"] for e in res["load_balancers"]] == ["fixed", "fixed"], res
