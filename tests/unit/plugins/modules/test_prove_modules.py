"""The prove modules' own reading: where a load balancer is published, the
temporary route's file, and when a wedge must not be made."""
import json

import pytest

from ansible_collections.homelab.edge.plugins.modules import prove_autoheal as pa
from ansible_collections.homelab.edge.plugins.modules import prove_inflight as pi
from ansible_collections.homelab.edge.plugins.modules import prove_k3d_serverlb as pk


class Container(object):
    def __init__(self, ports):
        self.attrs = {"NetworkSettings": {"Ports": ports}}


def test_published_ports_one_address_each_ipv4_first():
    got = pk.published(Container({
        "53/udp": [{"HostIp": "::", "HostPort": "30053"}, {"HostIp": "0.0.0.0", "HostPort": "30053"}],
        "1053/udp": [{"HostIp": "192.168.1.10", "HostPort": "31053"}],
        "6443/tcp": [{"HostIp": "127.0.0.1", "HostPort": "6550"}],
        "80/tcp": None,  # exposed, not published
        "9/sctp": [{"HostIp": "", "HostPort": "9"}]}))
    assert got == {"udp": [("192.168.1.10", 31053), ("127.0.0.1", 30053)], "tcp": [("127.0.0.1", 6550, 6443)]}
    assert pk.published(Container({"53/udp": [{"HostIp": "::", "HostPort": "53"}]}))["udp"] == [("::1", 53)]


def test_the_temporary_route_is_a_router_and_service_of_its_own():
    doc = json.loads(pi.route_text("homelab-edge-prove-1a2b", "homelab-edge-prove-1a2b.prove.invalid", "websecure",
                                   True, "http://172.18.0.9:80"))
    router = doc["http"]["routers"]["homelab-edge-prove-1a2b"]
    assert router == {"rule": "Host(`homelab-edge-prove-1a2b.prove.invalid`)", "entryPoints": ["websecure"],
                      "service": "homelab-edge-prove-1a2b", "tls": {}, "middlewares": ["homelab-edge-prove-1a2b-mark"]}
    assert doc["http"]["services"]["homelab-edge-prove-1a2b"]["loadBalancer"]["servers"] == [{"url": "http://172.18.0.9:80"}]
    # its one middleware marks its answers (Traefik's, never another server's); the limit it gets as every route
    # on the entrypoint does (the entrypoint's middleware, before the router's)
    assert doc["http"]["middlewares"] == {"homelab-edge-prove-1a2b-mark": {"headers": {"customResponseHeaders": {
        "X-Homelab-Edge-Prove": "homelab-edge-prove-1a2b"}}}}
    assert "tls" not in json.loads(pi.route_text("r", "r.prove.invalid", "web", False, "http://x:80"))["http"]["routers"]["r"]


def traefik(health="healthy", labels=None, test=("CMD", "traefik", "healthcheck", "--ping"), running=True):
    """Traefik's inspect: its websecure (:443 in its container, as the test_prove_autoheal fixture's static config
    says) published on 443."""
    return {"State": {"Running": running, "Health": {"Status": health}, "StartedAt": "t0"},
            "Config": {"Labels": {"autoheal": "true"} if labels is None else labels,
                       "Healthcheck": {"Test": list(test)} if test else {},
                       "Cmd": ["--configFile=/etc/traefik/traefik.yml"]},
            "NetworkSettings": {"Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "443"}]},
                                "Networks": {"web": {"IPAddress": "172.18.0.2"}}}}


AUTOHEAL = {"State": {"Running": True}, "Config": {"Env": ["AUTOHEAL_INTERVAL=5"]}}


@pytest.mark.parametrize("t, autoheal, answers, words", [
    (traefik(running=False), AUTOHEAL, True, "traefik is not running"),
    (traefik(), None, True, "the autoheal container autoheal is not running"),
    (traefik(labels={}), AUTOHEAL, True, "lacks the label autoheal=true"),
    (traefik(test=None), AUTOHEAL, True, "has no health check"),
    (traefik(test=("CMD-SHELL", "traefik healthcheck || true")), AUTOHEAL, True, "cannot fail"),
    (traefik(health="starting"), AUTOHEAL, True, "traefik is starting now, not healthy"),
    (traefik(), AUTOHEAL, False, "does not answer at the url now"),
])
def test_a_wedge_autoheal_could_not_see_or_heal_is_refused(t, autoheal, answers, words):
    assert words in pa.refusal(t, autoheal, answers, "traefik", "autoheal")


def test_a_wedge_autoheal_watches_is_not_refused():
    assert pa.refusal(traefik(), AUTOHEAL, True, "traefik", "autoheal") is None
    # autoheal watching every container needs no label
    every = {"State": {"Running": True}, "Config": {"Env": ["AUTOHEAL_CONTAINER_LABEL=all"]}}
    assert pa.refusal(traefik(labels={}), every, True, "traefik", "autoheal") is None
