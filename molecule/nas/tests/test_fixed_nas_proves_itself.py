"""homelab.edge.prove on the NAS (first of the scenario, on the converged
NAS), as a user runs it: the playbook over SSH with sudo, its table and JSON.
Traefik's in-flight limit through a temporary slow route (the lab's backend
image stands in for whoami: no registry here), the drain values in Traefik's
namespace, and the opt-in wedge healed by autoheal. Each proven both ways:
with the limit lifted no 429 comes; with autoheal frozen the wedge is not
healed, and the module resumes Traefik itself. Nothing is left behind."""
import base64
import json
import os
import sys
import time

import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.dirname(__file__)]
import adhoc  # noqa: E402
import test_nas as base  # noqa: E402
import upstream_images  # noqa: E402

NAS = testinfra.get_host("docker://nas-lab")
INVENTORY = adhoc.molecule_inventory()
MIDDLEWARE = "/srv/traefik-a/config/dynamic/inflight-limit.yml"


def prove(extra=None, *args):
    """homelab.edge.prove --tags nas on nas-a, with the lab's backend."""
    return adhoc.prove(INVENTORY, "--tags", "nas", "--limit", "nas-a",
                       "-e", json.dumps(dict(adhoc.PROVE_LAB_BACKEND, **(extra or {}))), *args)


def rows(report):
    return dict((r["check"], r) for r in report["rows"])


def left_behind():
    """Temporary routes' containers, files and routers (Traefik's API, once its file watcher caught up) still there."""
    deadline = time.time() + 60   # bounded: however long a loaded machine's watcher takes
    while True:
        routers = NAS.check_output("docker exec traefik-a wget -q -O - http://127.0.0.1:9099/api/http/routers")
        if "homelab-edge-prove" not in routers or time.time() > deadline:
            break
        time.sleep(0.5)
    return (NAS.check_output("docker ps -aq --filter label=homelab.edge.prove"),
            NAS.check_output("ls /srv/traefik-a/config/dynamic | grep homelab-edge-prove || true"),
            "homelab-edge-prove" in routers)


def live_amount(amount, seconds=60):
    """Until Traefik runs the middleware with `amount` (its file provider's watcher, however long it takes),
    bounded: True once it does."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        out = NAS.run("docker exec traefik-a wget -q -O - http://127.0.0.1:9099/api/http/middlewares/inflight-limit@file")
        if out.rc == 0 and json.loads(out.stdout).get("inFlightReq", {}).get("amount") == amount:
            return True
        time.sleep(0.5)
    return False


def test_the_fixed_nas_proves_its_limit_and_drain_values_and_leaves_nothing():
    rc, out, report = prove()
    assert rc == 0, out[-3000:]
    got = rows(report)
    inflight = got["Traefik in-flight limit"]
    assert inflight["status"] == "proved" and inflight["measured"] == "400 answered 200, 10 answered 429", inflight
    assert got["drain values"]["status"] == "proved", got["drain values"]
    assert got["drain values"]["measured"] == "tcp_fin_timeout=15 tcp_abort_on_overflow=1"
    if upstream_images.reason("autoheal") is None:
        assert got["autoheal on a wedge"]["status"] == "skipped" and "opt-in" in got["autoheal on a wedge"]["reasons"][0]
    else:  # the lab has no autoheal image: its part is skipped by tag, its row left out
        assert "autoheal on a wedge" not in got, got
    assert left_behind() == ("", "", False)
    adhoc.record("nas", "prove_inflight", measured=inflight["measured"].replace(" ", "_"))


def test_check_mode_plans_without_a_route_or_a_request():
    rc, out, report = prove(None, "--check")
    assert rc == 0, out[-3000:]
    inflight = rows(report)["Traefik in-flight limit"]
    assert report["check_mode"] and inflight["status"] == "planned", inflight
    assert inflight["measured"].startswith("would add route homelab-edge-prove-")
    assert inflight["measured"].endswith("and send 410 requests at once (bound 60 s)")
    assert left_behind() == ("", "", False)


def test_with_the_limit_lifted_no_429_comes_and_the_proof_fails():
    """The crafted broken case: the middleware's amount raised past what is sent (Traefik reloads it live)."""
    original = NAS.file(MIDDLEWARE).content_string
    assert "amount: 400" in original
    NAS.check_output("sed -i 's/amount: 400/amount: 100000/' %s" % MIDDLEWARE)
    try:
        assert live_amount(100000), "Traefik did not take the raised amount"
        rc, out, report = prove()
    finally:
        NAS.check_output("echo %s | base64 -d > %s" % (base64.b64encode(original.encode()).decode(), MIDDLEWARE))
        assert live_amount(400), "Traefik did not take the amount back"
    assert rc != 0
    inflight = rows(report)["Traefik in-flight limit"]
    assert inflight["status"] == "failed" and inflight["measured"] == "410 answered 200, 0 answered 429", inflight
    assert any("0 answered 429 of the 10 over the amount" in r for r in inflight["reasons"]), inflight
    assert left_behind() == ("", "", False)
    assert NAS.file(MIDDLEWARE).content_string == original


@upstream_images.needs("autoheal")
def test_the_opt_in_wedge_is_healed_by_autoheal_and_timed():
    assert base.wait_health("traefik-a", "healthy", 30) is not None
    rc, out, report = prove({"autoheal_prove_wedge": True})
    assert rc == 0, out[-3000:]
    wedge = rows(report)["autoheal on a wedge"]
    assert wedge["status"] == "proved" and wedge["measured"].startswith("outage "), wedge
    adhoc.record("nas", "prove_wedge", measured=wedge["measured"].replace(" ", "_"))


@upstream_images.needs("autoheal")
def test_the_opt_in_entrypoint_wedge_is_healed_through_the_check_on_that_entrypoint():
    """Alive but dark only where users come in (traefik-b's :443, published on 9443): the role's health check asks
    there, so autoheal restarts it; the rule is gone with the old namespace."""
    rc, out, report = prove({"autoheal_prove_wedge": True, "autoheal_prove_wedge_kind": "entrypoint",
                             "autoheal_prove_container": "traefik-b", "autoheal_prove_url": "https://127.0.0.1:9443"})
    assert rc == 0, out[-3000:]
    wedge = rows(report)["autoheal on a wedge"]
    assert wedge["status"] == "proved" and wedge["measured"].startswith("outage "), wedge
    adhoc.record("nas", "prove_entrypoint_wedge", measured=wedge["measured"].replace(" ", "_"))


@upstream_images.needs("autoheal")
def test_with_autoheal_frozen_the_wedge_is_not_healed_and_traefik_is_resumed():
    NAS.check_output("docker pause autoheal")
    try:
        rc, out, report = prove({"autoheal_prove_wedge": True, "autoheal_prove_timeout": 20})
        # resumed, not left wedged: it serves again before autoheal is back
        served = base.get(443, "site")[0]
    finally:
        NAS.check_output("docker unpause autoheal")
        # autoheal may still restart it for the health checks it failed while wedged: let that settle
        base.wait_health("traefik-a", "healthy", 60)
    assert rc != 0
    wedge = rows(report)["autoheal on a wedge"]
    assert wedge["status"] == "failed" and wedge["reasons"] == ["not healed within 20 s; Traefik resumed (SIGCONT)"], wedge
    assert served == 200


@upstream_images.needs("autoheal")
def test_a_wedge_autoheal_could_not_see_is_refused_before_it_is_made():
    NAS.check_output("docker stop autoheal")
    try:
        started = NAS.check_output("docker inspect -f '{{.State.StartedAt}}' traefik-a")
        rc, out, report = prove({"autoheal_prove_wedge": True})
        assert NAS.check_output("docker inspect -f '{{.State.StartedAt}}' traefik-a") == started
    finally:
        NAS.check_output("docker start autoheal")
    assert rc != 0
    wedge = rows(report)["autoheal on a wedge"]
    assert wedge["status"] == "refused" and "autoheal container autoheal is not running" in wedge["reasons"][0], wedge
