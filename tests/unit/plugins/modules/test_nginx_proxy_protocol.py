"""nginx_proxy_protocol's main() on files in a temporary directory, nginx's
commands faked (`nginx -T` prints the files as they are on disk, in nginx's
order): check mode writes nothing; symlinks stay links and backups go under
the state directory; every failure after the write puts each file back byte
for byte and runs nginx -t again (loudly when it still fails); a run cut off
between two writes is rolled back by the next one, which says so; refusals
and nginx's own refusal come before anything is written."""
import os

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_plan as plan
from ansible_collections.homelab.edge.plugins.modules import nginx_proxy_protocol as npp

from .conftest import assert_documented_as_specified

NAS = ["10.8.0.2:443", "10.8.0.2:80"]


def warned(res, key="warnings"):
    """A result's warnings (or deprecations) as one text: plain strings up to ansible-core 2.18, dicts after."""
    def texts(x):
        if isinstance(x, str):
            return [x]
        if isinstance(x, dict):
            return [t for v in x.values() for t in texts(v)]
        if isinstance(x, list):
            return [t for v in x for t in texts(v)]
        return []
    return " | ".join(texts(res.get(key, [])))


STREAM = "server {\n  listen 443;\n  proxy_pass 10.8.0.2:443;\n}\nserver { listen 80; proxy_pass 10.8.0.2:80; }\n"
UDP = "server {\n  listen 443 udp reuseport;\n  proxy_pass 10.8.0.2:443;\n}\n"


class Nginx(object):
    """nginx's commands on the test's files: -T prints them in `order`
    (paths as the includes write them); -t fails while `broken` says so."""

    def __init__(self, order):
        self.order, self.broken, self.reload_rc, self.calls = order, lambda: False, 0, []

    def dump(self):
        out = b""
        for path in self.order:
            with open(path, "rb") as f:
                out += b"# configuration file " + path.encode() + b":\n" + f.read() + b"\n"
        return out

    def __call__(self, words):
        self.calls.append(words[1:])
        if words[1] == "-T":
            return (1, b"", b"nginx: [emerg] broken\n") if self.broken() else (0, self.dump(), b"syntax is ok")
        if words[1] == "-t":
            return (1, b"", b"nginx: [emerg] still broken") if self.broken() else (0, b"", b"test is successful")
        if words[1] == "-V":
            return 0, b"", b"configure arguments: --pid-path=/run/nginx.pid"
        if "reload" in words:
            return self.reload_rc, b"", b"" if not self.reload_rc else b"reload failed"
        return 0, b"", b""


@pytest.fixture
def vps(tmp_path, monkeypatch, commands):
    """A VPS's nginx: nginx.conf including streams-enabled/*, where nas.conf is a link to streams-available/."""
    monkeypatch.setattr(npp.host, "is_root", lambda: True)
    monkeypatch.setattr(npp, "STATE_DIR", str(tmp_path / "state"))
    etc = tmp_path / "etc"
    (etc / "streams-available").mkdir(parents=True)
    (etc / "streams-enabled").mkdir()
    (etc / "streams-available" / "nas.conf").write_text(STREAM)
    (etc / "streams-enabled" / "nas.conf").symlink_to(etc / "streams-available" / "nas.conf")
    (etc / "nginx.conf").write_text("events {}\nstream { include %s/streams-enabled/*; }\n" % etc)
    nginx = Nginx([str(etc / "nginx.conf"), str(etc / "streams-enabled" / "nas.conf")])
    commands.answers[("nginx",)] = nginx
    reloads = []
    monkeypatch.setattr(npp, "reload", lambda module, conf: reloads.append(1))
    asked = []
    monkeypatch.setattr(npp.probe_, "ask_upstream", lambda address, sni=None: asked.append(address) or ("tls", "TLS"))
    monkeypatch.setattr(npp.probe_, "through_listener", lambda check, kind: (True, "TLS through"))
    vps = type("VPS", (), {})()
    vps.etc, vps.nginx, vps.reloads, vps.asked, vps.state = etc, nginx, reloads, asked, tmp_path / "state"
    vps.config = str(etc / "nginx.conf")
    vps.target = etc / "streams-available" / "nas.conf"
    vps.link = etc / "streams-enabled" / "nas.conf"
    return vps


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(npp, monkeypatch)


def test_check_mode_shows_the_change_asks_the_upstreams_and_writes_nothing(run_main, vps):
    res = run_main(npp, check=True, diff=True, upstreams=NAS, config=vps.config)
    assert res["changed"] and sorted(res["changed_servers"]) == [["443"], ["80"]]
    assert res["diff"][0]["before_header"] == "%s (-> %s)" % (vps.link, vps.target)
    assert res["diff"][0]["after"].count(plan.LINE) == 2 and vps.target.read_text() == STREAM
    assert sorted(vps.asked) == NAS and not vps.reloads and not os.path.exists(str(vps.state))


def test_a_link_stays_a_link_its_target_is_edited_and_backups_stay_out_of_nginxs_directories(run_main, vps):
    res = run_main(npp, upstreams=NAS, config=vps.config, backup=True)
    assert res["changed"] and not res.get("failed"), res
    assert vps.link.is_symlink() and os.readlink(str(vps.link)) == str(vps.target)
    assert vps.target.read_text().count(plan.LINE) == 2
    assert sorted(os.listdir(str(vps.etc / "streams-enabled"))) == ["nas.conf"]
    assert sorted(os.listdir(str(vps.etc / "streams-available"))) == ["nas.conf"]
    backup = res["files"][0]["backup"]
    assert backup.startswith(str(vps.state) + str(vps.target)) and open(backup).read() == STREAM
    assert res["files"][0]["real_path"] == str(vps.target) and not os.path.exists(npp.journal_path())
    assert vps.reloads == [1] and ["-t", "-c", vps.config] in vps.nginx.calls
    # a second run changes nothing; absent gives the bytes back, the link still a link
    again = run_main(npp, upstreams=NAS, config=vps.config)
    assert not again["changed"] and again["changed_servers"] == []
    undone = run_main(npp, upstreams=NAS, config=vps.config, state="absent")
    assert undone["changed"] and vps.target.read_text() == STREAM and vps.link.is_symlink()


@pytest.mark.parametrize("fail, why", [
    ("test", "nginx -t refuses the change (nginx: [emerg] still broken)"),
    ("reload", "nginx -s reload failed"),
    ("check", "after the reload, connections through nginx fail"),
])
def test_every_failure_after_the_write_puts_the_files_back_byte_for_byte(run_main, vps, monkeypatch, fail, why):
    if fail == "test":
        vps.nginx.broken = lambda: plan.LINE in vps.target.read_text()
    if fail == "reload":
        def reload(module, conf):
            vps.reloads.append(1)
            if plan.LINE in vps.target.read_text():
                raise npp.Failed("nginx -s reload failed: reload failed")
        monkeypatch.setattr(npp, "reload", reload)
    if fail == "check":
        monkeypatch.setattr(npp.probe_, "through_listener",
                            lambda c, kind: (plan.LINE not in vps.target.read_text(), "connection reset"))
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert res["failed"] and why in res["msg"], res["msg"]
    assert "your files are back byte for byte" in res["msg"] and res["msg"].endswith("nginx -t passes")
    assert vps.target.read_text() == STREAM and vps.link.is_symlink()
    assert vps.nginx.calls[-1][:1] == ["-t"] or vps.reloads  # nginx -t ran on the files put back
    assert not os.path.exists(npp.journal_path())
    if fail in ("reload", "check"):  # nginx runs the files put back, not the failed ones
        assert len(vps.reloads) == 2 and "nginx was reloaded on them" in res["msg"]


def test_nginx_t_failing_on_the_files_put_back_is_said_loudly(run_main, vps, monkeypatch):
    monkeypatch.setattr(npp.probe_, "through_listener",
                        lambda c, kind: (plan.LINE not in vps.target.read_text(), "connection reset"))
    state = {"after": False}

    def broken():  # something else broke nginx's config meanwhile (a certificate renewed away, say)
        return state["after"]
    vps.nginx.broken = broken
    real_restore = npp.restore

    def restore(files):
        state["after"] = True
        return real_restore(files)
    monkeypatch.setattr(npp, "restore", restore)
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert res["failed"] and res["msg"].startswith("LOUD: after the reload, connections through nginx fail")
    assert "nginx -t fails: nginx: [emerg] still broken" in res["msg"] and "do not reload or restart it" in res["msg"]
    assert vps.target.read_text() == STREAM and os.path.exists(npp.journal_path())


def test_a_run_cut_off_between_two_writes_is_rolled_back_by_the_next_one_which_says_so(run_main, vps, monkeypatch):
    other = vps.etc / "streams-available" / "other.conf"
    other.write_text("server {\n  listen 8080;\n  proxy_pass 10.8.0.2:80;\n}\n")
    (vps.etc / "streams-enabled" / "other.conf").symlink_to(other)
    vps.nginx.order.append(str(vps.etc / "streams-enabled" / "other.conf"))
    # the cut-off run: its journal, the first file written, the second not yet
    files = [{"path": str(vps.link), "real": str(vps.target), "old": STREAM,
              "new": STREAM.replace("proxy_pass 10.8.0.2:443;\n", "proxy_pass 10.8.0.2:443;\n  %s  %s\n"
                                    % (plan.LINE, plan.MARK))},
             {"path": str(vps.etc / "streams-enabled" / "other.conf"), "real": str(other), "old": other.read_text(),
              "new": "written by nobody"}]

    class Params(object):
        params = {"config": vps.config}
    npp.write_journal(Params(), files, "writing")
    npp.write_bytes(str(vps.target), files[0]["new"])
    leftover = other.parent / (npp.temp_prefix(str(other)) + "x1y2")  # the second write, cut before its rename
    leftover.write_text("half")
    checked = run_main(npp, check=True, upstreams=NAS, config=vps.config, state="absent")
    assert "found the journal of a run that was cut off" in warned(checked)
    assert os.path.exists(npp.journal_path()) and plan.LINE in vps.target.read_text()
    res = run_main(npp, upstreams=["10.9.9.9:443"], config=vps.config, state="absent")
    assert res["journal"]["restored"] == [str(vps.target)] and res["journal"]["left"] == []
    assert "put back %s; nginx -t passes" % vps.target in warned(res)
    assert vps.target.read_text() == STREAM and not os.path.exists(npp.journal_path()) and res["changed"]
    assert not leftover.exists() and other.read_text().startswith("server {")


def test_a_file_changed_by_someone_else_since_the_cut_off_run_is_left_and_named(run_main, vps):
    class Params(object):
        params = {"config": vps.config}
    npp.write_journal(Params(), [{"path": str(vps.link), "real": str(vps.target), "old": "what it was\n",
                                  "new": "what the run wrote\n"}], "writing")
    res = run_main(npp, upstreams=NAS, config=vps.config, state="absent")
    assert res["journal"]["left"] == [str(vps.target)] and vps.target.read_text() == STREAM
    assert "left %s as it is (changed by someone else since)" % vps.target in warned(res)


def test_when_nginx_cannot_load_the_config_the_refusal_is_nginxs_own_words(run_main, vps):
    vps.nginx.broken = lambda: True
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert res["failed"] and "nginx itself cannot load your configuration as it is: nginx: [emerg] broken" in res["msg"]
    assert res["msg"].endswith("nothing was changed.") and vps.target.read_text() == STREAM


def test_a_backup_copy_in_an_included_directory_is_named_in_the_refusal(run_main, vps, commands):
    copy = "%s/streams-enabled/nas.conf.4242.2026-03-01@10:00:00~" % vps.etc
    commands.answers[("nginx", "-T")] = (1, b"", ('nginx: [emerg] duplicate "0.0.0.0:443" address and port pair in '
                                                  '%s:2\n' % copy).encode())
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert "%s looks like a backup copy" % copy in res["msg"] and "move it out" in res["msg"]


def test_a_refused_server_stops_the_run_before_anything_is_written(run_main, vps):
    vps.target.write_text("upstream nas {\n  server 10.8.0.2:443;\n  server 192.168.1.9:443 backup;\n}\n"
                          "server { listen 443; proxy_pass nas; }\n" + STREAM.split("}\n", 1)[1])
    before = vps.target.read_text()
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert res["failed"] and res["msg"].startswith("1 stream server(s) refused: the stream server on 443")
    assert "192.168.1.9:443 (backup, upstream nas)" in res["msg"] and res["msg"].endswith("nothing was changed.")
    assert vps.target.read_text() == before and not vps.asked
    assert [s["outcome"] for s in res["servers"]] == ["refused", "add"]


def test_udp_servers_are_left_and_the_warning_names_the_port(run_main, vps):
    vps.target.write_text(STREAM + UDP)
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert vps.target.read_text().count(plan.LINE) == 2 and "listen 443 udp reuseport;\n  proxy_pass 10.8.0.2:443;\n}" \
        in vps.target.read_text()
    assert "is UDP (port 443): it never gets PROXY protocol (nginx would put the header in front of the first datagram " \
        "of each session, which QUIC (HTTP/3) cannot parse)" in warned(res)
    assert [s["outcome"] for s in res["servers"]] == ["add", "add", "udp"]


def test_an_upstream_that_does_not_take_the_header_yet_is_refused_and_nothing_is_written(run_main, vps, monkeypatch):
    monkeypatch.setattr(npp.probe_, "ask_upstream", lambda a, sni=None: (None, "it speaks TLS without a PROXY header"))
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert res["failed"] and "do not accept PROXY protocol from this host yet: 10.8.0.2:443: it speaks TLS" in res["msg"]
    assert res["msg"].endswith("nothing was changed.") and vps.target.read_text() == STREAM


def test_a_listener_that_fails_before_the_change_is_refused_with_how_to_skip_the_check(run_main, vps, monkeypatch):
    monkeypatch.setattr(npp.probe_, "through_listener", lambda c, kind: (False, "ConnectionRefusedError"))
    res = run_main(npp, upstreams=NAS, config=vps.config)
    assert res["failed"] and "the check through nginx fails before any change" in res["msg"]
    assert "probe: false (vps_proxy_protocol_probe)" in res["msg"] and vps.target.read_text() == STREAM


def test_probe_false_changes_unchecked_and_says_what_was_not_checked(run_main, vps):
    res = run_main(npp, upstreams=NAS, config=vps.config, probe=False)
    assert res["changed"] and not vps.asked and res["probes"] == []
    assert "probe: false: not checked that 10.8.0.2:443, 10.8.0.2:80 accept PROXY protocol" in warned(res)


def test_tls_ports_is_deprecated_and_ignored(run_main, vps):
    res = run_main(npp, check=True, upstreams=NAS, config=vps.config, tls_ports=[443])
    assert "tls_ports is ignored" in warned(res, "deprecations")


def test_reload_waits_until_the_master_runs_new_workers(monkeypatch, tmp_path):
    real_sleep = npp.time.sleep
    pidfile = tmp_path / "nginx.pid"
    pidfile.write_text("%d\n" % os.getpid())
    seen = iter([{10: "nginx: worker process"}, {10: "nginx: worker process"},
                 {10: "nginx: worker process is shutting down", 11: "nginx: worker process"}])
    monkeypatch.setattr(npp, "workers", lambda master: next(seen))
    monkeypatch.setattr(npp, "pid_file", lambda module, conf: str(pidfile))
    monkeypatch.setattr(npp, "nginx", lambda module, *a: (0, "", ""))
    monkeypatch.setattr(npp.time, "sleep", lambda s: None)

    class Module(object):
        params = {"config": "/etc/nginx/nginx.conf"}
    npp.reload(Module(), None)
    with pytest.raises(StopIteration):
        next(seen)  # it looked until the old worker was shutting down beside a new one
    monkeypatch.setattr(npp, "workers", lambda master: {10: "nginx: worker process"})
    monkeypatch.setattr(npp, "RELOAD_TIMEOUT", 0.05)
    monkeypatch.setattr(npp.time, "sleep", lambda s: real_sleep(0.01))
    with pytest.raises(npp.Failed, match="kept its old workers"):
        npp.reload(Module(), None)
    pidfile.unlink()
    with pytest.raises(npp.Failed, match="nginx is not running"):
        npp.reload(Module(), None)
