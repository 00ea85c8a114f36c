"""A flood from hundreds of addresses through the lab's edge path (issue 63: seed 001's untested case), in one run,
both ways: 300 source addresses of the internet client, 5 TLS connections each, each holding the site's /slower page
(tests/support/many_sources.py, the compiled floodgen), through the VPS and the tunnel to the NAS, while the LAN's
probes ask the NAS directly and an ordinary client asks through the VPS.

- With the per-address limits alone (the VPS's total and rate bound taken out for the run, ufw_connlimit with 0):
  every connection gets through to Traefik - 5 per address is far under any per-address limit.
- With the total the site playbook put on the VPS (inventories/lab: 400 per port; the rate bound is off in the
  lab): what reaches the NAS stays at the total, the rest are reset at the VPS, the LAN's probes are served
  throughout, Traefik stays healthy and is never restarted, the public path answers again within seconds of the
  flood's end, and the way in (a new SSH login, the tunnel) is never cut.

Runs last (after the alert tests: its flood would set off their alerts), about two minutes."""
import os
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import edge  # noqa: E402
import many_sources  # noqa: E402

# the whole lab's (Molecule default); a developer may point it at an edge lab of another prefix set up the same way
# (many_sources.inventory, site.yml)
PREFIX = os.environ.get("HOMELAB_EDGE_PREFIX", "lab")
INVENTORY = os.environ.get("HOMELAB_EDGE_INVENTORY", os.path.join(ROOT, "inventories", "lab", "hosts.yml"))
TOTAL = 400            # inventories/lab: vps_connlimit_total's default
SOURCES, EACH, RATE = 300, 5, 300.0   # 1,500 connections in 5 s, each holding /slower (6 s)
QUIET_S, WATCH_S = 3, 40


def bounds(total):
    """The VPS's bounds on all sources as the run wants them: 0 takes the total out (the per-address limit stays)."""
    r = adhoc.run_module("ufw_connlimit", {"ports": [80, 443], "limit": 100, "total": total, "rate": 0},
                         target="%s-vps" % PREFIX, inventory=INVENTORY, become=True)
    assert not r.get("failed"), r.get("msg")
    return r


def one(lab, label):
    health_before = many_sources.traefik_health(lab)
    watch = many_sources.Watch(lab, QUIET_S + 5 + WATCH_S)
    time.sleep(QUIET_S)
    start = time.time()
    gen = many_sources.flood(lab, SOURCES, EACH, RATE, mode="tls", timeout=10.0)
    end = start + SOURCES * EACH / RATE
    way_in = many_sources.way_in(lab, edge.ssh_ports(PREFIX)["vps"])
    time.sleep(max(0.0, start + 5 + WATCH_S - QUIET_S - time.time()))
    watched = watch.collect()
    out = many_sources.summary(watched, start, end)
    out.update(label=label, generator=dict((k, v) for k, v in gen.items() if k != "timeline"), way_in=way_in,
               health_before=health_before, health_after=many_sources.traefik_health(lab))
    return out


@pytest.fixture(scope="module")
def runs():
    lab = many_sources.Lab(PREFIX)
    out = {}
    with many_sources.sources(lab):
        bounds(0)
        try:
            out["per_address"] = one(lab, "per-address limits alone")
        finally:
            live = bounds(TOTAL)
        assert live["bounds"]["live"]["ipv4"]["443"]["total"] == TOTAL
        out["total"] = one(lab, "with the total")
    for name, r in out.items():
        g = r["generator"]
        adhoc.record("site", "many_sources_" + name, valid=g["valid"], planned=g["planned"],
                     sources=g["sources_connected"], connected=g["connected"], refused=g["refused"],
                     ok_2xx=g["ok_2xx"], r429=g["r429"], traefik_open_sockets_peak=r["peak"]["open_sockets"],
                     lan_site_served=r["lan_during"]["site"]["served"], lan_site_sent=r["lan_during"]["site"]["sent"],
                     public_again_s=r["public_again_s"])
    return out


def test_the_flood_is_a_valid_one_from_every_source_both_times(runs):
    for r in runs.values():
        g = r["generator"]
        assert g["valid"], g["invalid_because"]
        assert (g["sources"], g["sources_used"], g["planned"]) == (SOURCES, SOURCES, SOURCES * EACH), g


def test_the_per_address_limits_alone_let_it_through(runs):
    g = runs["per_address"]["generator"]
    # every connection reached Traefik: none reset at the VPS; far more answered (2xx or Traefik's own 429) than the
    # total lets through in the run beside it (TOTAL + 50). How many of all are answered is the NAS's capacity, not
    # the limits': with make test's other stream beside it, 1128 of 1500 were (tests/output/site.txt)
    assert g["refused"] == 0 and g["connected"] == SOURCES * EACH, g
    assert g["ok_2xx"] + g["r429"] > 2 * TOTAL, g
    assert runs["per_address"]["peak"]["open_sockets"] > 2 * TOTAL, runs["per_address"]["peak"]


def test_the_total_holds_what_reaches_the_nas_and_resets_the_rest(runs):
    g, peak = runs["total"]["generator"], runs["total"]["peak"]
    assert g["refused"] >= SOURCES * EACH - 2 * TOTAL, g    # reset at the VPS, before the tunnel
    assert g["ok_2xx"] + g["r429"] <= TOTAL + 50, g          # a few more as the first ones end
    assert peak["open_sockets"] < runs["per_address"]["peak"]["open_sockets"] / 2, (peak, runs["per_address"]["peak"])


def test_the_nas_serves_its_lan_throughout_and_traefik_is_never_restarted(runs):
    r = runs["total"]
    for target, counts in r["lan_during"].items():
        assert counts["sent"] > 0 and counts["served"] == counts["sent"], (target, counts)
    assert r["health_after"].startswith("healthy") and r["health_after"] == r["health_before"], \
        (r["health_before"], r["health_after"])


def test_the_public_path_answers_again_within_seconds_and_the_way_in_is_never_cut(runs):
    r = runs["total"]
    assert r["public_again_s"] is not None and r["public_again_s"] <= 15, r["public_again_s"]
    assert r["way_in"] == {"ssh_banner": True, "tunnel": True}, r["way_in"]
