"""The tunnel's total at Traefik (module_utils/traefik/tunnel.py and its hooks in inflight.py): the entrypoint added
to YAML, TOML and flags configs in the user's style, what it copies from the entrypoint the tunnel used to arrive
on, the compose port, the module's two middlewares, a second run changing nothing, turning it off, the refusals,
and the read-back of Traefik's API (router names as Traefik v3.6.12 showed them for a router on two entrypoints)."""
import difflib

import pytest
import yaml

from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik import tunnel as traefik_tunnel
from ansible_collections.homelab.edge.plugins.module_utils.traefik import yaml_text

STATIC = """# Static config, written by hand - keep my comments.
entryPoints:
  web:
    address: ":80"
  websecure:
    address: ":443"   # the LAN and, before, the tunnel
    transport:
      respondingTimeouts:
        readTimeout: 30s
    http:
      tls:
        certResolver: le
      middlewares:
        - crowdsec@file   # mine
providers:
  file:
    directory: /etc/traefik/dynamic
"""
DIRECTORY = {"kind": "directory", "dir": "/etc/traefik/dynamic"}
OPTS = {"name": "inflight-limit", "amount": 400, "entrypoints": ["websecure"], "provider": DIRECTORY,
        "tunnel_total": 200, "tunnel_entrypoint": "tunnel", "tunnel_port": 10443, "tunnel_publish_address": "",
        "proxy_protocol_trusted_ips": ["10.8.0.1/32"]}


def edit(text, **kw):
    opts = dict(OPTS, **kw)
    return yaml_text.edit_yaml(text, traefik_inflight.static_changes(yaml.safe_load(text), opts))


def test_the_tunnel_gets_an_entrypoint_with_the_lans_tls_and_middlewares_then_the_total():
    new = edit(STATIC)
    # theirs kept byte for byte: no line of theirs removed or changed
    assert [ln for ln in difflib.ndiff(STATIC.splitlines(), new.splitlines()) if ln.startswith("- ")] == []
    ep = yaml.safe_load(new)["entryPoints"]["tunnel"]
    assert ep["address"] == ":10443"
    assert ep["http"]["tls"] == {"certResolver": "le"}
    assert ep["transport"] == {"respondingTimeouts": {"readTimeout": "30s"}}
    assert ep["http"]["middlewares"] == ["crowdsec@file", "inflight-limit@file", "inflight-limit-tunnel-pool@file",
                                         "inflight-limit-tunnel-total@file"]
    assert ep["proxyProtocol"] == {"trustedIPs": ["10.8.0.1/32"]}
    # the LAN's entrypoint keeps its own middlewares (and the per-client limit): never the total
    lan = yaml.safe_load(new)["entryPoints"]["websecure"]["http"]["middlewares"]
    assert lan == ["crowdsec@file", "inflight-limit@file"]
    # a second run changes nothing; the tunnel's own trust is not merged twice
    assert edit(new) == new


def test_a_changed_total_port_or_trust_is_set_on_the_entrypoint_the_module_added():
    new = edit(STATIC)
    again = yaml.safe_load(edit(new, tunnel_port=10444, proxy_protocol_trusted_ips=["10.9.0.1/32"]))
    assert again["entryPoints"]["tunnel"]["address"] == ":10444"
    assert again["entryPoints"]["tunnel"]["proxyProtocol"] == {"trustedIPs": ["10.9.0.1/32"]}


def test_turned_off_the_entrypoint_goes_again():
    new = edit(STATIC)
    off = edit(new, tunnel_total=0)
    assert "tunnel" not in yaml.safe_load(off)["entryPoints"]
    # an entrypoint of the user's named tunnel (not the module's middlewares) is never removed
    theirs = STATIC.replace("providers:", "  tunnel:\n    address: \":7000\"\nproviders:")
    kept = yaml.safe_load(edit(theirs, tunnel_total=0))["entryPoints"]["tunnel"]
    assert kept["address"] == ":7000" and "http" not in kept


def test_the_module_file_holds_the_pool_and_the_total_keyed_on_the_pool_header():
    doc = yaml.safe_load(traefik_inflight.dynamic_text(dict(OPTS, verify_api=False)))
    mws = doc["http"]["middlewares"]
    assert mws["inflight-limit-tunnel-pool"] == {"headers": {"customRequestHeaders": {"X-Homelab-Edge-Pool": "tunnel"}}}
    assert mws["inflight-limit-tunnel-total"] == {"inFlightReq": {"amount": 200, "sourceCriterion": {
        "requestHeaderName": "X-Homelab-Edge-Pool"}}}
    assert set(yaml.safe_load(traefik_inflight.dynamic_text(dict(OPTS, tunnel_total=0)))["http"]["middlewares"]) == \
        {"inflight-limit"}


def test_toml_gets_the_entrypoint_as_a_table():
    text = ('[entryPoints]\n  [entryPoints.websecure]\n    address = ":443"\n    [entryPoints.websecure.http.tls]\n'
            '      certResolver = "le"\n')
    changes = traefik_inflight.static_changes(traefik_inflight.parse_static(text, "/t.toml"), OPTS)
    new = traefik_inflight.edit_static(text, changes, "/t.toml")
    ep = traefik_inflight.parse_static(new, "/t.toml")["entryPoints"]["tunnel"]
    assert ep["address"] == ":10443" and ep["http"]["tls"] == {"certResolver": "le"}
    assert ep["http"]["middlewares"][-2:] == ["inflight-limit-tunnel-pool@file", "inflight-limit-tunnel-total@file"]
    assert traefik_inflight.static_changes(traefik_inflight.parse_static(new, "/t.toml"), OPTS) == []


def test_flags_copy_the_tls_flags_and_add_the_entrypoint():
    flags = {"entrypoints.websecure.address": ":443", "entrypoints.websecure.http.tls": "true",
             "entrypoints.websecure.http.tls.certresolver": "le", "entrypoints.web.address": ":80"}
    add, remove = traefik_inflight.flag_changes(flags, OPTS)
    assert add["entrypoints.tunnel.address"] == ":10443"
    assert add["entrypoints.tunnel.http.tls"] == "true" and add["entrypoints.tunnel.http.tls.certresolver"] == "le"
    assert add["entrypoints.tunnel.http.middlewares"] == ("inflight-limit@file,inflight-limit-tunnel-pool@file,"
                                                          "inflight-limit-tunnel-total@file")
    assert add["entrypoints.tunnel.proxyprotocol.trustedips"] == "10.8.0.1/32"
    flags.update(add)
    add, remove = traefik_inflight.flag_changes(flags, dict(OPTS, tunnel_total=0))
    assert sorted(remove) == sorted(k for k in flags if k.startswith("entrypoints.tunnel."))


def test_compose_publishes_the_port_once_and_not_in_the_hosts_network():
    svc = {"image": "traefik:v3.6", "ports": ["443:443", "80:80"]}
    assert traefik_tunnel.compose_changes(svc, "traefik", OPTS, "default") == [
        ("append", ["services", "traefik", "ports"], "10443:10443")]
    assert traefik_tunnel.compose_changes(svc, "traefik", dict(OPTS, tunnel_publish_address="10.8.0.2"), "default") \
        == [("append", ["services", "traefik", "ports"], "10.8.0.2:10443:10443")]
    assert traefik_tunnel.compose_changes({"ports": ["10.8.0.2:10443:10443"]}, "traefik", OPTS, "default") == []
    assert traefik_tunnel.compose_changes({"ports": [{"target": 10443, "published": 10443}]}, "traefik", OPTS,
                                          "default") == []
    assert traefik_tunnel.compose_changes(svc, "traefik", OPTS, "host") == []


@pytest.mark.parametrize("kw, words", [
    ({"tunnel_port": 443}, "where your entrypoint websecure listens"),
    ({"tunnel_entrypoint": "web"}, "an entrypoint named web exists already"),
    ({"tunnel_total": -3}, "tunnel_total must be"),
])
def test_refusals_name_the_clash(kw, words):
    with pytest.raises(traefik_tunnel.TunnelError, match=words):
        opts = dict(OPTS, **kw)
        traefik_inflight.static_changes(yaml.safe_load(STATIC), opts)
        traefik_inflight.dynamic_text(opts)


# Traefik v3.6.12's API for a router on [websecure] (a), one on [websecure, tunnel] (b) and one without entryPoints
# (c), the tunnel's entrypoint carrying the two middlewares (measured in a network namespace)
API_ROUTERS = [
    {"name": "a@file", "status": "enabled", "using": ["websecure"]},
    {"name": "b@file", "status": "enabled", "using": ["websecure"]},
    {"name": "c@file", "status": "enabled", "using": ["websecure"]},
    {"name": "tunnel-b@file", "status": "enabled", "using": ["tunnel"],
     "middlewares": ["inflight-limit@file", "inflight-limit-tunnel-pool@file", "inflight-limit-tunnel-total@file"]},
    {"name": "tunnel-c@file", "status": "enabled", "using": ["tunnel"],
     "middlewares": ["inflight-limit@file", "inflight-limit-tunnel-pool@file", "inflight-limit-tunnel-total@file"]},
    {"name": "api@internal", "status": "enabled", "using": ["traefik"]},
    {"name": "homelab-edge-api@file", "status": "enabled", "using": ["homelab-edge-api"]},
]
API_MWS = [{"name": "inflight-limit-tunnel-pool@file", "status": "enabled"},
           {"name": "inflight-limit-tunnel-total@file", "status": "enabled",
            "inFlightReq": {"amount": 200, "sourceCriterion": {"requestHeaderName": "X-Homelab-Edge-Pool"}}}]


def test_the_api_says_which_routers_answer_through_the_tunnel():
    seen = traefik_tunnel.routers(API_ROUTERS, ["websecure"], "tunnel")
    assert seen == {"through": ["b@file", "c@file"], "missing": ["a@file"]}
    assert traefik_tunnel.bound_text(200, seen["through"]) == (
        "200 in flight through the tunnel per router, all clients together: 2 routers (b@file, c@file), up to 400 in all")


def test_the_api_check_wants_both_middlewares_loaded_and_on_every_tunnel_router_pool_first():
    assert traefik_tunnel.check(API_ROUTERS, API_MWS, "tunnel", "inflight-limit", 200) == []
    assert traefik_tunnel.check(API_ROUTERS, API_MWS, "tunnel", "inflight-limit", 300) == [
        "middleware inflight-limit-tunnel-total@file runs {'amount': 200, 'sourceCriterion': {'requestHeaderName': "
        "'X-Homelab-Edge-Pool'}}, not amount 300 per X-Homelab-Edge-Pool (not reloaded yet)"]
    swapped = [dict(r, middlewares=list(reversed(r.get("middlewares") or []))) for r in API_ROUTERS]
    assert "router tunnel-b@file does not run" in traefik_tunnel.check(swapped, API_MWS, "tunnel", "inflight-limit", 200)[0]
    assert traefik_tunnel.check(API_ROUTERS, API_MWS[1:], "tunnel", "inflight-limit", 200) == [
        "middleware inflight-limit-tunnel-pool@file is not loaded"]


def test_as_default_goes_with_the_tunnel_where_the_lans_entrypoint_has_it():
    """Traefik v3: routers without entryPoints join only the entrypoints with asDefault."""
    text = STATIC.replace('    address: ":443"   # the LAN and, before, the tunnel\n',
                          '    address: ":443"   # the LAN and, before, the tunnel\n    asDefault: true\n')
    assert yaml.safe_load(edit(text))["entryPoints"]["tunnel"]["asDefault"] is True
    assert "asDefault" not in yaml.safe_load(edit(STATIC))["entryPoints"]["tunnel"]
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443",
                                                 "entrypoints.websecure.asdefault": "true"}, OPTS)
    assert add["entrypoints.tunnel.asdefault"] == "true"
