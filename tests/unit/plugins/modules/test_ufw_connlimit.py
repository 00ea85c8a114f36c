"""ufw_connlimit's main() on ufw's files as Debian ships them (inactive: no reload, no live rules to read) in a
temporary directory, the checking tools faked: check mode shows the block in the diff and writes nothing; a run
writes it (each new file checked by the tool first) and a second run changes nothing; a port Docker publishes is
refused with nothing written."""
import json

import pytest

from ansible_collections.homelab.edge.plugins.modules import ufw_connlimit as mod

from ...conftest import fixture
from .conftest import assert_documented_as_specified

TRAEFIK = [{"Name": "/traefik", "State": {"Running": True},
            "NetworkSettings": {"Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "443"}]}}}]


@pytest.fixture
def ufw(tmp_path, monkeypatch, commands):
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    for name in ("before.rules", "before6.rules"):
        (tmp_path / name).write_text(fixture(name))
    (tmp_path / "ufw.conf").write_text("ENABLED=no\n")
    commands.missing.add("docker")
    return tmp_path


def files(rules_dir):
    return dict((p.name, p.read_text()) for p in rules_dir.iterdir())


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_shows_the_block_and_writes_nothing(run_main, ufw):
    before = files(ufw)
    res = run_main(mod, check=True, diff=True, rules_dir=str(ufw), limit=50)
    assert res["changed"] and [d["after_header"] for d in res["diff"]] == [str(ufw / "before.rules"),
                                                                           str(ufw / "before6.rules")]
    assert "--connlimit-above 50" in res["diff"][0]["after"] and files(ufw) == before


def test_a_run_writes_the_checked_files_and_a_second_changes_nothing(run_main, ufw, commands):
    res = run_main(mod, rules_dir=str(ufw), limit=50)
    assert res["changed"] and not res["reloaded"] and "--connlimit-above 50" in (ufw / "before.rules").read_text()
    assert len(commands.ran("iptables-restore", "--test")) == len(commands.ran("ip6tables-restore", "--test")) == 1
    assert not run_main(mod, rules_dir=str(ufw), limit=50)["changed"]


def test_after_init_is_left_as_it_is_where_nothing_calls_the_hook(run_main, ufw):
    """Issue 62: with no port Docker publishes, the module made ufw's stock after.init executable (its content
    unchanged), and the undo, which has nothing to take out of it, left it so."""
    (ufw / "after.init").write_text(fixture("after.init"))
    (ufw / "after.init").chmod(0o640)
    assert run_main(mod, rules_dir=str(ufw), limit=50)["changed"]
    assert (ufw / "after.init").read_text() == fixture("after.init") and (ufw / "after.init").stat().st_mode & 0o777 == 0o640


def test_a_port_docker_publishes_is_refused_with_nothing_written(run_main, ufw, commands):
    commands.missing.clear()
    commands.answers[("docker", "info")] = (0, json.dumps({"ServerVersion": "27.5.1"}), "")
    commands.answers[("docker", "ps", "-q")] = (0, "f00d\n", "")
    commands.answers[("docker", "inspect")] = (0, json.dumps(TRAEFIK), "")
    before = files(ufw)
    res = run_main(mod, rules_dir=str(ufw))
    assert res["failed"] and "port(s) 443 are published by Docker (443: traefik)" in res["msg"]
    assert res["docker_ports"] == {"443": ["traefik"]} and files(ufw) == before
