"""homelab.edge.prove over the whole lab (inventories/lab), as the README's
quick start ends: after the site playbook, every check proves its fix - DNS
through both clusters' load balancers, the VPS's limit from this machine (the
controller, outside the VPS), Traefik's in-flight limit and drain values on
the NAS - in one table and one JSON report. (After test_monitoring: the
in-flight check's 429s would fire its alert.)"""
import json
import os
import sys

import docker

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.dirname(__file__)]
import adhoc  # noqa: E402
import hosts  # noqa: E402
import test_monitoring as monitoring_tests  # noqa: E402
import upstream_images  # noqa: E402

INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")


def test_prove_over_the_whole_lab_proves_every_fix():
    vps = hosts.address("lab-vps", "lab-wan")
    extra = dict(adhoc.PROVE_LAB_BACKEND, vps_connlimit_prove_address=vps)
    try:
        rc, out, report = adhoc.prove(INVENTORY, "-e", json.dumps(extra))
    finally:
        # the in-flight check's requests all came from one address: ordinary clients again (status's per-IP check)
        monitoring_tests.mixed_clients(docker.from_env(), vps)
    assert rc == 0, out[-4000:]
    got = dict(((r["host"], r["check"], r["target"].split(" ")[0]), r) for r in report["rows"])
    want = {("lab-k3d", "k3d DNS load", "k3d-lab-serverlb"), ("lab-k3d", "k3d DNS load", "k3d-lab2-serverlb"),
            ("lab-vps", "VPS connection limit", "%s:80" % vps), ("lab-vps", "VPS connection limit", "%s:443" % vps),
            ("lab-nas", "Traefik in-flight limit", "traefik"), ("lab-nas", "drain values", "traefik")}
    assert {k for k, r in got.items() if r["status"] == "proved"} == want, report["rows"]
    # the opt-in wedge's row is there, skipped, where the lab runs autoheal; left out with its tag where it does not
    autoheal = upstream_images.reason("autoheal") is None
    assert (got[("lab-nas", "autoheal on a wedge", "traefik")]["status"] == "skipped") if autoheal else \
        not [k for k in got if k[1] == "autoheal on a wedge"]
    assert got[("lab-nas", "Traefik in-flight limit", "traefik")]["measured"] == "50 answered 200, 10 answered 429"
    assert report["summary"] == {"counts": {"proved": 6, "failed": 0, "refused": 0, "skipped": int(autoheal),
                                            "planned": 0}, "ok": True}
    for key in sorted(want):
        adhoc.record("site", "prove", host=key[0], check=key[1].replace(" ", "_"),
                     measured=got[key]["measured"].replace(" ", "_"))
