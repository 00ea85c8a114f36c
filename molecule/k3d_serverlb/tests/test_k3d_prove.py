"""homelab.edge.prove on the k3d host, as a user runs it (the playbook, its
table and its JSON): the fixed load balancer proves itself under a small DNS
load; check mode only plans; a DNS server that does not answer fails the
proof (test_k3d_undo: a load balancer k3d left unfixed is refused)."""
import re
import os
import sys
import tempfile
import threading
import time

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.dirname(__file__)]
import adhoc  # noqa: E402
import k3d  # noqa: E402
import test_k3d_serverlb as base  # noqa: E402

INVENTORY = """all:
  children:
    k3d_hosts:
      hosts:
        k3d-host:
          ansible_connection: local
          ansible_python_interpreter: %s
          k3d_serverlb_clusters: [%s]
          k3d_serverlb_udp_ports: {53: dns, 1053: dns}
"""


def prove(*args, clusters=("mol",)):
    """homelab.edge.prove --tags k3d on this host: (rc, output, report or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        inv = os.path.join(tmp, "hosts.yml")
        with open(inv, "w") as f:
            f.write(INVENTORY % (sys.executable, ", ".join(clusters)))
        return adhoc.prove(inv, "--tags", "k3d", *args)


ANSWERED = re.compile(r"dnsmasq\[(\d+)\]: queries forwarded \d+, queries answered locally (\d+)")


def dns_answered(client):
    """Queries mol's DNS servers (the stand-in's two dnsmasq) have answered so far: each writes its
    counters to its log on SIGUSR1."""
    server = client.containers.get(k3d.server_name("mol"))
    since = time.time() - 1
    rc, out = server.exec_run(["pkill", "-USR1", "-x", "dnsmasq"])
    assert rc == 0, out
    for dummy in range(20):
        time.sleep(0.25)
        last = dict(ANSWERED.findall(server.logs(since=int(since)).decode("utf-8", "replace")))
        if len(last) == 2:
            return sum(int(n) for n in last.values())
    raise AssertionError("the DNS servers wrote no counters")


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def test_prove_proves_the_fixed_load_balancer(client):
    before = dns_answered(client)
    rc, out, report = prove()
    assert rc == 0, out[-3000:]
    # the 200 queries went through to the cluster's DNS servers and were answered there, after one query to each
    # of its two UDP ports (53, 1053) that found them DNS
    assert dns_answered(client) - before == 200 + 2
    rows = report["rows"]
    assert [r["target"] for r in rows] == [k3d.lb_name("mol")] and rows[0]["status"] == "proved", rows
    assert rows[0]["host"] == "k3d-host" and rows[0]["measured"].startswith("200/200 answered, 0 'not enough'")
    assert report["summary"]["ok"] and report["summary"]["counts"]["proved"] == 1
    # the table names each column and the row's status
    assert "host" in out and "measured" in out and "proved" in out
    adhoc.record("k3d_serverlb", "prove_fixed", measured=rows[0]["measured"].replace(" ", "_"))


def test_check_mode_plans_and_sends_nothing(client):
    before = dns_answered(client)
    rc, out, report = prove("--check")
    assert rc == 0, out[-3000:]
    row = report["rows"][0]
    assert report["check_mode"] and row["status"] == "planned", row
    assert row["measured"] == "would send 200 queries at 20/s (10 s, bound 22 s), up to 100 sessions of 256 allowed"
    # nothing went through the load balancer: its DNS servers answered no query since
    assert dns_answered(client) == before


def test_a_dns_server_that_stops_answering_fails_the_proof(client):
    """The crafted broken case: CoreDNS (the stand-in's dnsmasq) frozen once the load is under way (a port that
    answers nothing before the load is left out: it need not be DNS). The queries after it go unanswered: the
    proof fails and says so."""
    before = dns_answered(client)
    result = {}
    run = threading.Thread(target=lambda: result.update(zip(("rc", "out", "report"),
                                                            prove("-e", "k3d_serverlb_prove_count=400"))))
    run.start()
    try:
        deadline = time.time() + 60
        while time.time() < deadline and dns_answered(client) - before < 40:
            time.sleep(0.5)
        base._dns_server(client, "mol", "STOP")
        run.join(180)
    finally:
        base._dns_server(client, "mol", "CONT")
    assert result["rc"] != 0, result.get("out", "")[-3000:]
    row = result["report"]["rows"][0]
    assert row["status"] == "failed" and any("of 400 queries unanswered" in r for r in row["reasons"]), row
    assert not result["report"]["summary"]["ok"]
    assert "1 failed, 0 refused, 0 proved, 0 skipped" in result["out"], result["out"][-3000:]


def test_a_dns_server_that_answers_nothing_before_the_load_leaves_nothing_to_prove(client):
    """Frozen before: no UDP port answers DNS, so no load is sent; skipped, saying why, and the run fails (nothing
    proved)."""
    base._dns_server(client, "mol", "STOP")
    try:
        rc, out, report = prove()
    finally:
        base._dns_server(client, "mol", "CONT")
    assert rc != 0
    row = report["rows"][0]
    assert row["status"] == "skipped" and "answers a DNS query now" in row["reasons"][0], row


def test_a_rate_that_would_take_the_budget_is_refused_before_sending(client):
    rc, out, report = prove("-e", "k3d_serverlb_prove_rate=300", "-e", "k3d_serverlb_prove_count=3000")
    assert rc != 0
    row = report["rows"][0]
    assert row["status"] == "refused" and "lower the rate to 51/s or less" in row["reasons"][0], row
