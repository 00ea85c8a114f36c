import pytest

from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import sysctl as tcp_drain_sysctl


def test_valid_values():
    assert tcp_drain_sysctl.validate({"net.ipv4.tcp_fin_timeout": 15, "net.ipv4.tcp_abort_on_overflow": "1"}) == []
    assert tcp_drain_sysctl.normalize({"net.ipv4.tcp_abort_on_overflow": "1"}) == {"net.ipv4.tcp_abort_on_overflow": 1}


@pytest.mark.parametrize("values, words", [
    ({"net.ipv4.tcp_tw_reuse": 1}, "unknown key net.ipv4.tcp_tw_reuse"),
    ({"net.ipv4.tcp_fin_timeout": "15s"}, "must be an integer"),
    ({"net.ipv4.tcp_fin_timeout": 1.5}, "must be an integer"),
    ({"net.ipv4.tcp_fin_timeout": True}, "must be an integer"),
    ({"net.ipv4.tcp_fin_timeout": 0}, "between 1 and 600"),
    ({"net.netfilter.nf_conntrack_tcp_timeout_time_wait": 99999}, "between 1 and 3600"),
])
def test_invalid_values(values, words):
    problems = tcp_drain_sysctl.validate(values)
    assert len(problems) == 1 and words in problems[0]


@pytest.mark.parametrize("stderr, reason", [
    ('sysctl: cannot stat /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_time_wait: No such file or directory', "missing"),
    ('sysctl: setting key "net.ipv4.tcp_fin_timeout": Read-only file system', "read-only"),
    ('sysctl: permission denied on key "net.ipv4.tcp_fin_timeout"', "read-only"),
    ("sysctl: something else", "error"),
])
def test_classify_error(stderr, reason):
    assert tcp_drain_sysctl.classify_error(stderr) == reason


def test_explain_says_what_to_do():
    assert "nf_conntrack" in tcp_drain_sysctl.explain("net.netfilter.nf_conntrack_tcp_timeout_time_wait", "missing", "the host")
    assert "compose 'sysctls:'" in tcp_drain_sysctl.explain("net.ipv4.tcp_fin_timeout", "read-only", "container x")


def test_a_refused_write_as_a_plain_user_says_become():
    err = "sysctl: permission denied on key \"net.ipv4.tcp_fin_timeout\""
    assert tcp_drain_sysctl.classify_error(err, root=False) == "not-root"
    assert tcp_drain_sysctl.classify_error(err, root=True) == "read-only"
    assert "become: true" in tcp_drain_sysctl.explain("net.ipv4.tcp_fin_timeout", "not-root", "the host")


def test_only_the_keys_the_module_changed_are_put_back_and_the_first_value_before_wins():
    keys = {"net.ipv4.tcp_fin_timeout": {"before": 60, "after": 15, "status": "changed"},
            "net.ipv4.tcp_abort_on_overflow": {"before": 1, "after": 1, "status": "ok"},
            "net.netfilter.nf_conntrack_tcp_timeout_time_wait": {"before": None, "after": None, "status": "missing"}}
    assert tcp_drain_sysctl.remember_before({}, keys) == {"net.ipv4.tcp_fin_timeout": 60}
    later = {"net.ipv4.tcp_fin_timeout": {"before": 15, "after": 20, "status": "changed"}}
    assert tcp_drain_sysctl.remember_before({"net.ipv4.tcp_fin_timeout": 60}, later) == {"net.ipv4.tcp_fin_timeout": 60}
