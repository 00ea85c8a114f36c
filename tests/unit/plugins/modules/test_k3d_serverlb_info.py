"""k3d_serverlb_info's main() on two load balancers behind a fake engine (module_utils' Observed container): a
running stock one is read as not fixed, with its DNS upstreams probed, and nothing in it is changed; a stopped
one is listed as not running."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.modules import k3d_serverlb_info as mod

from ..module_utils.test_k3d_serverlb import LBL, Observed
from .conftest import K3D_UDP_PORTS, assert_documented_as_specified, k3d_engine


@pytest.fixture
def stock(monkeypatch):
    stopped = Observed(status="exited")
    stopped.name, stopped.labels = "k3d-ai-serverlb", dict(LBL, **{"k3d.cluster": "ai"})
    lb = Observed()
    k3d_engine(monkeypatch, mod, [lb, stopped])
    monkeypatch.setattr(mod, "dns_probe", lambda client: lambda node, port: 0.004)
    return lb


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_a_stock_load_balancer_is_read_as_not_fixed_and_left_as_it_is(run_main, stock):
    template = stock.fs[k3d_container.TEMPLATE_PATH]
    res = run_main(mod, udp_ports=K3D_UDP_PORTS)
    running, stopped = sorted(res["load_balancers"], key=lambda e: e["name"] != "k3d-core-serverlb")
    assert not res["changed"] and running["running"] and running["state"] == "not_fixed" and running["drift"]
    assert running["dns_upstreams"] and all(u["answer_s"] == 0.004 for u in running["dns_upstreams"])
    assert stopped == {"name": "k3d-ai-serverlb", "cluster": "ai", "running": False}
    assert stock.fs[k3d_container.TEMPLATE_PATH] == template and stock.renders == []
