"""ufw_access's main() on a fresh VPS (ufw installed, inactive, no rules; sshd on 2222, WireGuard, nginx,
node_exporter, Docker publishing 443) with its ufw files in a temporary directory and its commands faked:
check mode plans the allow rules and runs no ufw command; a run adds them and enables ufw; an SSH port named
in closed is refused with nothing run and nothing written."""
import pytest

from ansible_collections.homelab.edge.plugins.modules import ufw_access as mod

from ..module_utils.test_ufw_access import SS, tuple_line
from .conftest import assert_documented_as_specified

KEPT_OPEN = ["80/tcp", "2222/tcp", "9100/tcp", "51820/udp"]  # Docker's 443 is not ufw's to cut


@pytest.fixture
def vps(tmp_path, monkeypatch, commands):
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    for name in ("user.rules", "user6.rules"):
        (tmp_path / name).write_text("*filter\nCOMMIT\n")
    (tmp_path / "ufw.conf").write_text("ENABLED=no\n")
    (tmp_path / "default").write_text('DEFAULT_INPUT_POLICY="DROP"\nDEFAULT_FORWARD_POLICY="DROP"\n')
    commands.answers[("ss",)] = (0, SS, "")
    commands.answers[("sshd", "-T")] = (0, "port 2222\naddressfamily any\n", "")

    def ufw_allow(argv):  # as ufw does: a tuple line in user.rules
        port, dummy, proto = argv[2].partition("/")
        rules = tmp_path / "user.rules"
        rules.write_text(rules.read_text().replace("COMMIT", tuple_line("allow", proto, port) + "\nCOMMIT"))
        return 0, "Rule added\n", ""
    commands.answers[("ufw", "allow")] = ufw_allow
    return tmp_path


def run(run_main, vps, **args):
    return run_main(mod, rules_dir=str(vps), defaults_file=str(vps / "default"),
                    ssh_connection="198.51.100.7 50022 203.0.113.10 2222", **args)


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_plans_every_listening_port_and_runs_no_ufw_command(run_main, vps, commands):
    res = run(run_main, vps, check=True, diff=True)
    assert res["changed"] and not res["enabled_before"] and res["enabled"]
    assert sorted(res["added"]) == sorted(KEPT_OPEN) and res["ssh"]["sshd"] == ["2222/tcp"]
    assert "allow 51820/udp (homelab.edge)" in res["diff"]["after"] and "inactive" in res["diff"]["before"]
    assert commands.ran("ufw") == [] and (vps / "user.rules").read_text() == "*filter\nCOMMIT\n"


def test_a_run_adds_the_rules_then_enables_ufw_and_nothing_listening_is_blocked(run_main, vps, commands):
    res = run(run_main, vps, allow=[443])
    assert res["changed"] and res["blocked"] == []
    assert [c[2] for c in commands.ran("ufw", "allow")] == sorted(KEPT_OPEN + ["443/tcp"], key=mod.ufw_access.sort_key)
    assert commands.calls[-1] == ["ufw", "--force", "enable"]


def test_closing_the_ssh_port_is_refused_with_nothing_run(run_main, vps, commands):
    res = run(run_main, vps, closed=["2222/tcp"])
    assert res["failed"] and "closed names the SSH port(s) 2222/tcp" in res["msg"]
    assert res["msg"].endswith("nothing was changed") and commands.ran("ufw") == []
    assert (vps / "ufw.conf").read_text() == "ENABLED=no\n"
