"""The keeper (roles/k3d_serverlb/files/k3d-serverlb-keeper.py) outlives the
Docker engine: after the engine goes away it connects again, checks every
load balancer and goes on reacting to k3d's events. A fake engine here; the
Molecule k3d scenario restarts the real one."""
import importlib.util
import os
import sys
import types

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import template as k3d_template

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEEPER = os.path.join(ROOT, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py")


class Stop(BaseException):
    """Ends the keeper's endless loop in a test."""


class Engine(object):
    """Docker engines in the order the keeper connects to them: each lists
    its load balancers and then either fails (the engine went away) or
    sends its events."""

    def __init__(self, sessions):
        self.sessions = list(sessions)

    def from_env(self):
        if not self.sessions:
            raise Stop()
        running, events = self.sessions.pop(0)
        client = types.SimpleNamespace(running=running)
        client.containers = types.SimpleNamespace(get=lambda cid: types.SimpleNamespace(name=cid, status="running"))

        def stream(**kw):
            if isinstance(events, Exception):
                raise events
            return iter(events)
        client.events = stream
        return client


@pytest.fixture
def keeper(monkeypatch):
    spec = importlib.util.spec_from_file_location("k3d_serverlb_keeper", KEEPER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.k3d_fix, mod.k3d_container, mod.k3d_template = k3d_fix, k3d_container, k3d_template
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) > 5:
            raise Stop()
    monkeypatch.setattr(mod.time, "sleep", sleep)
    monkeypatch.setattr(mod, "log", lambda msg: None)
    monkeypatch.setattr(k3d_container, "find_load_balancers", lambda client, names, clusters, not_found: [
        (name, types.SimpleNamespace(name=name, status="running"), False) for name in client.running])
    monkeypatch.setattr(k3d_container, "wanted", lambda container, names, clusters: True)
    return mod


def run(keeper, engine, monkeypatch):
    fixed = []
    k = keeper.Keeper(dict(k3d_fix.DEFAULTS))
    monkeypatch.setattr(k, "fix", lambda container: fixed.append(container.name))
    monkeypatch.setattr(keeper.threading, "Thread", lambda target, args, daemon: types.SimpleNamespace(
        start=lambda: target(*args)))
    monkeypatch.setitem(sys.modules, "docker", types.SimpleNamespace(
        from_env=engine.from_env, errors=types.SimpleNamespace(NotFound=KeyError)))
    with pytest.raises(Stop):
        k.run()
    return fixed


def test_after_the_engine_goes_away_the_keeper_connects_again_checks_and_reacts(keeper, monkeypatch):
    engine = Engine([
        (["k3d-a-serverlb"], ConnectionError("engine stopped")),           # before the restart
        (["k3d-a-serverlb", "k3d-b-serverlb"],                               # after it
         [{"id": "k3d-b-serverlb", "Action": "start"}]),                     # k3d recreated one
    ])
    fixed = run(keeper, engine, monkeypatch)
    # only a keeper that reconnected can have checked both again and reacted to the new start
    assert fixed == ["k3d-a-serverlb", "k3d-a-serverlb", "k3d-b-serverlb", "k3d-b-serverlb"]


# The same container event as each engine sends it (Docker 29 at API 1.52 and later: no id, status, from)
EVENT_API_152 = {"Type": "container", "Action": "start", "scope": "local", "time": 1764662400,
                 "timeNano": 1764662400000000000,
                 "Actor": {"ID": "k3d-b-serverlb", "Attributes": {"k3d.role": "loadbalancer", "name": "k3d-b-serverlb"}}}
EVENT_API_143 = dict(EVENT_API_152, id="k3d-b-serverlb", status="start", **{"from": "homelab-edge/k3d-proxy:lab"})


@pytest.mark.parametrize("event", [EVENT_API_152, EVENT_API_143], ids=["api-1.52", "api-1.43"])
def test_the_keeper_reacts_to_either_event_shape(keeper, monkeypatch, event):
    engine = Engine([([], [event])])
    assert run(keeper, engine, monkeypatch) == ["k3d-b-serverlb"]


def test_an_event_without_a_container_is_skipped_not_a_reconnect(keeper, monkeypatch):
    engine = Engine([([], [{"Type": "container", "Action": "start"}, EVENT_API_152])])
    assert run(keeper, engine, monkeypatch) == ["k3d-b-serverlb"]


@pytest.mark.parametrize("event, want", [
    (EVENT_API_152, ("k3d-b-serverlb", "start")),
    (EVENT_API_143, ("k3d-b-serverlb", "start")),
    ({"id": "abc", "status": "create"}, ("abc", "create")),
    ({"Type": "container"}, (None, None)),
])
def test_event_of(event, want):
    assert k3d_container.event_of(event) == want


def test_the_keeper_applies_the_profiles_the_role_wrote(keeper, monkeypatch):
    """The role writes udp_ports into the keeper's JSON (keys become strings there): a load balancer k3d
    re-creates gets the same profiles as the module's run - DNS ports end at a reply, the tunnel keeps its
    datagrams."""
    import json
    cfg = json.loads(json.dumps(dict(k3d_fix.DEFAULTS, udp_ports={53: "dns", 1053: "dns", 51820: "stream"},
                                     udp_stream_timeout=180)))
    k = keeper.Keeper(cfg)
    handled = []
    monkeypatch.setattr(k3d_fix, "handle", lambda container, name, explicit, want, **kw: handled.append(want) or {
        "failed": False, "state_text": "fixed", "changed": False, "reasons": []})
    assert k.fix(types.SimpleNamespace(name="k3d-a-serverlb"))
    want, = handled
    assert want["udp_ports"] == {"53": "dns", "1053": "dns", "51820": "stream"} and want["udp_stream_timeout"] == 180
    template = k3d_template.patch_template(
        open(os.path.join(os.path.dirname(__file__), "fixtures", "k3d_nginx.tmpl")).read(), want)
    assert '{{- if (eq $port "1053" "53") }}' in template and "proxy_timeout 180s;" in template


@pytest.mark.parametrize("change, words", [
    ({"udp_ports": {"51820": "tunnel"}}, "port 51820 has profile 'tunnel'"),
    ({"udp_ports": None, "drop": "udp_ports"}, "lacks udp_ports"),
    ({"udp_stream_timeout": None, "drop": "udp_stream_timeout"}, "lacks udp_stream_timeout"),
])
def test_the_keeper_refuses_a_configuration_without_good_profiles(keeper, change, words):
    cfg = dict(k3d_fix.DEFAULTS, **dict((k, v) for k, v in change.items() if k != "drop"))
    cfg.pop(change.get("drop", "-"), None)
    with pytest.raises(SystemExit, match=words):
        keeper.Keeper(cfg)
