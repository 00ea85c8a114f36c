"""k3d_serverlb's main() on a stock k3d load balancer (module_utils' Fake container: its files, nginx's
workers, confd's render) behind a fake engine: check mode reports the change and writes nothing; a run puts
the fixed template in and nginx runs the fixed config; bad settings are refused before the engine is asked."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import template as k3d_template
from ansible_collections.homelab.edge.plugins.modules import k3d_serverlb as mod

from ..module_utils.test_k3d_serverlb import FIXED, Fake
from .conftest import K3D_UDP_PORTS, assert_documented_as_specified, k3d_engine


@pytest.fixture
def engine(monkeypatch):
    """The stock load balancer."""
    lb = Fake()
    engine = k3d_engine(monkeypatch, mod, [lb])
    engine.lb = lb
    return engine


def run(run_main, **args):
    return run_main(mod, udp_ports=K3D_UDP_PORTS, render_timeout=2, **args)


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_reports_the_change_and_writes_nothing(run_main, engine):
    template = engine.lb.fs[k3d_container.TEMPLATE_PATH]
    res = run(run_main, check=True)
    assert res["changed"] and [r["name"] for r in res["load_balancers"]] == ["k3d-core-serverlb"]
    assert engine.lb.fs[k3d_container.TEMPLATE_PATH] == template and engine.lb.renders == []


def test_a_run_puts_the_fixed_template_in_and_nginx_runs_it(run_main, engine):
    res = run(run_main)
    assert res["changed"] and res["failed_load_balancers"] == [] and res["load_balancers"][0]["state"] == "fixed"
    assert k3d_template.BEGIN in engine.lb.fs[k3d_container.TEMPLATE_PATH]
    assert engine.lb.fs[k3d_container.NGINX_CONF] == FIXED


def test_bad_settings_are_refused_before_the_engine_is_asked(run_main, engine):
    res = run_main(mod, render_timeout=0)
    assert res["failed"] and "render_timeout must be at least 1 second" in res["msg"] and engine.connected == []
