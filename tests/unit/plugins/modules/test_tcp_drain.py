"""tcp_drain's main() on live values only (no persist; its boot files are test_tcp_drain_module's): check mode
reports the change and sets nothing; a value out of range is refused before anything is read."""
import pytest

from ansible_collections.homelab.edge.plugins.modules import tcp_drain as mod

from .conftest import assert_documented_as_specified
from .test_tcp_drain_module import ABORT, FIN, FakeNamespace


@pytest.fixture
def live(monkeypatch, tmp_path):
    monkeypatch.setattr(mod, "Namespace", FakeNamespace)
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    FakeNamespace.live = {FIN: 60, ABORT: 0}
    return str(tmp_path / "state")


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_reports_the_change_and_sets_nothing(run_main, live):
    res = run_main(mod, check=True, diff=True, values={FIN: 15, ABORT: 0}, state_dir=live)
    assert res["changed"] and res["settings"][FIN] == {"before": 60, "after": 15, "status": "changed"}
    assert res["settings"][ABORT]["status"] == "ok" and "net.ipv4.tcp_fin_timeout = 15" in res["diff"][0]["after"]
    assert FakeNamespace.live == {FIN: 60, ABORT: 0}


def test_a_value_out_of_range_is_refused_before_anything_is_read(run_main, live, monkeypatch):
    monkeypatch.setattr(mod, "Namespace", None)  # a read would fail here
    res = run_main(mod, values={FIN: 0}, state_dir=live)
    assert res["failed"] and res["msg"].startswith("net.ipv4.tcp_fin_timeout must be between")
