"""nginx_proxy_protocol's apply(): every way a change can fail after the
write puts the user's files back (and nginx back on them). main(): check mode
shows the change and writes nothing; an upstream that does not take PROXY
protocol yet is refused before anything is written."""
import pytest

from ansible_collections.homelab.edge.plugins.modules import nginx_proxy_protocol as npp

from ..module_utils.test_nginx_stream import NAS, USER
from .conftest import assert_documented_as_specified


class Failed(Exception):
    pass


class Module(object):
    def __init__(self, rc_by_args):
        self.params = {"backup": False, "probe": True, "state": "present", "config": "/etc/nginx/nginx.conf",
                       "tls_ports": [443]}
        self.rc_by_args = rc_by_args
        self.calls = []

    def backup_local(self, path):
        return ""

    def atomic_move(self, src, dest, unsafe_writes=False):
        import os
        os.rename(src, dest)

    def get_bin_path(self, name, required=False):
        return "/usr/sbin/nginx"

    def run_command(self, argv, environ_update=None):
        self.calls.append(argv[1:])
        return self.rc_by_args.get(argv[1], 0), "", "failed" if self.rc_by_args.get(argv[1]) else ""

    def fail_json(self, **kw):
        raise Failed(kw["msg"])


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "stream.conf"
    path.write_text("old\n")
    return str(path)


def changes(path):
    return [(path, "old\n", "new\n", ["server 443"])]


@pytest.mark.parametrize("rc_by_args, probe_fails, why", [
    ({"-t": 1}, False, "nginx -t refuses"),
    ({"-s": 1}, False, "nginx reload failed"),
    ({}, True, "after the reload, connections through nginx fail"),
])
def test_every_failure_after_the_write_restores_the_files(conf, monkeypatch, rc_by_args, probe_fails, why):
    module = Module(rc_by_args)
    monkeypatch.setattr(npp, "probe_listeners", lambda m, c, r: ["127.0.0.1:443: reset"] if probe_fails else [])
    with pytest.raises(Failed, match=why):
        npp.apply(module, changes(conf), {"files": []})
    with open(conf) as f:
        assert f.read() == "old\n"
    if probe_fails:  # nginx runs the restored files, not the failed ones
        assert module.calls[-1] == ["-s", "reload"] and module.calls.count(["-s", "reload"]) == 2


def test_a_change_that_works_stays(conf, monkeypatch):
    monkeypatch.setattr(npp, "probe_listeners", lambda m, c, r: [])
    npp.apply(Module({}), changes(conf), {"files": []})
    with open(conf) as f:
        assert f.read() == "new\n"


# ---- main(): the documentation, and the probe that comes before any write

def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(npp, monkeypatch)


@pytest.fixture
def user_conf(tmp_path, monkeypatch):
    monkeypatch.setattr(npp.host, "is_root", lambda: True)
    path = tmp_path / "nginx.conf"
    path.write_text(USER)
    return path


def test_check_mode_shows_proxy_protocol_on_the_servers_to_the_nas_and_writes_nothing(
        run_main, user_conf, monkeypatch):
    monkeypatch.setattr(npp, "ask", lambda *a, **kw: (True, "TLS handshake"))
    res = run_main(npp, check=True, diff=True, upstreams=NAS, config=str(user_conf))
    assert res["changed"] and sorted(res["changed_servers"]) == [["443"], ["80"]]  # each server by its listens
    assert res["diff"][0]["after"].count("proxy_protocol on;") == 2 and user_conf.read_text() == USER


def test_an_upstream_without_proxy_protocol_is_refused_and_nothing_is_written(run_main, user_conf, monkeypatch):
    monkeypatch.setattr(npp, "ask", lambda *a, **kw: (False, "connection reset"))
    res = run_main(npp, upstreams=NAS, config=str(user_conf))
    assert res["failed"] and "do not accept PROXY protocol from this host yet: 10.8.0.2:443 (connection reset)" \
        in res["msg"] and res["msg"].endswith("nothing was changed")
    assert user_conf.read_text() == USER
