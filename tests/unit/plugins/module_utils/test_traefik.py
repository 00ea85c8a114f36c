import pytest

from ansible_collections.homelab.edge.plugins.module_utils import traefik


def test_inflight_per_ip_by_default():
    doc = traefik.inflight_middleware("inflight-limit", 400)
    assert doc == {"http": {"middlewares": {"inflight-limit": {"inFlightReq": {
        "amount": 400, "sourceCriterion": {"ipStrategy": {"depth": 0}}}}}}}


def test_inflight_other_criteria():
    mw = traefik.inflight_middleware("m", 10, "ip", 1, ["10.0.0.0/8"])["http"]["middlewares"]["m"]["inFlightReq"]
    assert mw["sourceCriterion"] == {"ipStrategy": {"depth": 1, "excludedIPs": ["10.0.0.0/8"]}}
    mw = traefik.inflight_middleware("m", 10, "host")["http"]["middlewares"]["m"]["inFlightReq"]
    assert mw["sourceCriterion"] == {"requestHost": True}
    mw = traefik.inflight_middleware("m", 10, "header", header="X-User")["http"]["middlewares"]["m"]["inFlightReq"]
    assert mw["sourceCriterion"] == {"requestHeaderName": "X-User"}


@pytest.mark.parametrize("kwargs, words", [
    ({"amount": 0}, "amount must be"),
    ({"amount": True}, "amount must be"),
    ({"amount": 5, "source": "cookie"}, "source must be"),
    ({"amount": 5, "source": "header"}, "needs a header"),
    ({"amount": 5, "depth": -1}, "depth must be"),
])
def test_inflight_bad_input(kwargs, words):
    with pytest.raises(traefik.TraefikConfigError, match=words):
        traefik.inflight_middleware("m", **kwargs)


WEBSECURE = {"address": ":443", "http": {"tls": {"certResolver": "le"}, "middlewares": ["auth@docker"]}}
STATIC = {
    "entryPoints": {"web": {"address": ":80"}, "websecure": WEBSECURE},
    "providers": {"docker": {"exposedByDefault": False}, "file": {"filename": "/etc/traefik/dynamic.yml"}},
    "certificatesResolvers": {"le": {"acme": {"email": "me@example.org"}}},
}


def test_merge_keeps_user_keys_and_is_idempotent():
    out = traefik.merge_static(STATIC, "inflight-limit@file", ["websecure"], "/etc/traefik/dynamic")
    assert out["entryPoints"]["websecure"]["http"] == {"tls": {"certResolver": "le"},
                                                       "middlewares": ["auth@docker", "inflight-limit@file"]}
    assert out["providers"] == {"docker": {"exposedByDefault": False},
                                "file": {"directory": "/etc/traefik/dynamic", "watch": True}}
    assert out["certificatesResolvers"] == STATIC["certificatesResolvers"]
    assert out["ping"] == {}
    assert "filename" in STATIC["providers"]["file"]  # input untouched
    assert traefik.merge_static(out, "inflight-limit@file", ["websecure"], "/etc/traefik/dynamic") == out


def test_merge_refuses_unknown_entrypoints():
    with pytest.raises(traefik.TraefikConfigError, match="entrypoint\\(s\\) websecur not defined"):
        traefik.merge_static(STATIC, "x@file", ["websecur"], "/d")


def test_merge_keeps_an_existing_ping_config():
    out = traefik.merge_static(dict(STATIC, ping={"entryPoint": "web"}), "x@file", ["web"], "/d")
    assert out["ping"] == {"entryPoint": "web"}
