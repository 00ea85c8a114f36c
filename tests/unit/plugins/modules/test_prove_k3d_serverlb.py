"""prove_k3d_serverlb's main() behind a fake engine (module_utils' Observed load balancer, published on
30053/udp): a fixed one is planned in check mode with no query sent; a stock one is refused (the load would
start the outage the check proves absent); a host without a load balancer gets one skipped row."""
import pytest

from ansible_collections.homelab.edge.plugins.modules import prove_k3d_serverlb as mod

from ..module_utils.test_k3d_serverlb import FIXED, K3D, Observed, patch
from .conftest import K3D_UDP_PORTS, assert_documented_as_specified, k3d_engine

PORTS = {"NetworkSettings": {"Ports": {"53/udp": [{"HostIp": "0.0.0.0", "HostPort": "30053"}]}}}


@pytest.fixture
def sent(monkeypatch):
    """The DNS queries sent: none may be, in these cases."""
    queries = []
    monkeypatch.setattr(mod.prove_net, "dns_paced", lambda *a: queries.append(a) or {"answered": 0})
    return queries


def published(lb):
    lb.attrs = PORTS
    return lb


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_a_fixed_load_balancer_is_planned_in_check_mode_with_nothing_sent(run_main, monkeypatch, sent):
    k3d_engine(monkeypatch, mod, [published(Observed(template=patch(K3D), conf=FIXED, limits=[16384]))])
    res = run_main(mod, check=True, udp_ports=K3D_UDP_PORTS)
    assert [r["status"] for r in res["rows"]] == ["planned"] and res["rows"][0]["measured"].startswith("would send 200")
    assert res["load_balancers"][0]["targets"]["dns"] == ["127.0.0.1:30053"] and sent == []


def test_a_stock_load_balancer_is_refused_with_nothing_sent(run_main, monkeypatch, sent):
    k3d_engine(monkeypatch, mod, [published(Observed())])
    res = run_main(mod, udp_ports=K3D_UDP_PORTS)
    assert res["rows"][0]["status"] == "refused" and "is not fixed" in res["rows"][0]["reasons"][0] and sent == []


def test_a_host_without_a_load_balancer_gets_one_skipped_row(run_main, monkeypatch, sent):
    k3d_engine(monkeypatch, mod, [])
    res = run_main(mod, clusters=["core"])
    assert res["load_balancers"] == [] and res["rows"][0]["status"] == "skipped"
    assert res["rows"][0]["reasons"] == ["no k3d load balancer on this host in clusters core"]
