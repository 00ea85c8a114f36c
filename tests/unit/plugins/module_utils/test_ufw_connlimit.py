import pytest

from ansible_collections.homelab.edge.plugins.module_utils import ufw_connlimit as uc

from ...conftest import fixture

BEFORE = fixture("before.rules")
BEFORE6 = fixture("before6.rules")


def block(family=4, ports=(80, 443), limit=100):
    return uc.render_block(family, list(ports), limit)


def test_render_block_ipv4_and_ipv6():
    b4 = block(4)
    assert b4[0] == uc.BEGIN and b4[-1] == uc.END
    assert b4[1] == ("-A ufw-before-input -p tcp --dport 80 -m conntrack --ctstate NEW -m connlimit "
                     "--connlimit-above 100 --connlimit-mask 32 -j REJECT --reject-with tcp-reset")
    b6 = block(6, ports=[443], limit=50)
    assert b6[1].startswith("-A ufw6-before-input -p tcp --dport 443 ")
    assert "--connlimit-above 50 --connlimit-mask 128" in b6[1]


def test_docker_published_ports_get_a_chain_of_their_own():
    text = uc.docker_chain_rules(4, [443], 100)
    lines = text.splitlines()
    assert lines[1:3] == ["*filter", ":homelab-edge-docker - [0:0]"] and lines[-1] == "COMMIT"
    assert lines[3] == ("-A homelab-edge-docker -p tcp -m conntrack --ctstate NEW --ctorigdstport 443 -m connlimit "
                        "--connlimit-above 100 --connlimit-mask 32 -j REJECT --reject-with tcp-reset")
    # DOCKER-USER is never declared: declaring it would flush Docker's, ufw-docker's and the admin's rules
    assert "DOCKER-USER" not in text
    assert "--connlimit-mask 128" in uc.docker_chain_rules(6, [443], 100)


def test_hook_puts_one_jump_first_and_never_fails_ufw():
    hook = uc.hook_script("/etc/ufw")
    assert hook.startswith("#!/bin/sh\n") and hook.rstrip().endswith("exit 0")
    assert 'while "$1" -D DOCKER-USER -j "$chain"' in hook and '"$1" -I DOCKER-USER 1 -j "$chain"' in hook
    assert "load iptables /etc/ufw/homelab-edge-docker.rules" in hook
    assert "load ip6tables /etc/ufw/homelab-edge-docker6.rules" in hook
    assert "-F DOCKER-USER" not in hook and "-X DOCKER-USER" not in hook


STOCK_AFTER_INIT = """#!/bin/sh
#
# after.init: if executable, called by ufw-init.
#
set -e

case "$1" in
start)
    # typically required
    ;;
stop)
    # typically required
    ;;
status)
    # optional
    ;;
flush-all)
    # optional
    ;;
*)
    echo "'$1' not supported"
    echo "Usage: after.init {start|stop|flush-all|status}"
    ;;
esac
"""


def test_after_init_gets_one_call_before_the_users_commands():
    out = uc.apply_init_block(STOCK_AFTER_INIT, uc.init_call("/etc/ufw"))
    lines = out.split("\n")
    assert lines[4] == uc.BEGIN and lines[6] == uc.END and lines[7] == "set -e"
    assert lines[5] == '[ -x /etc/ufw/homelab-edge.init ] && /etc/ufw/homelab-edge.init "$1" || true'
    assert uc.apply_init_block(out, uc.init_call("/etc/ufw")) == out
    assert uc.apply_init_block(out, [], present=False) == STOCK_AFTER_INIT
    assert uc.apply_init_block(None, uc.init_call("/etc/ufw")).startswith("#!/bin/sh\n" + uc.BEGIN)
    assert uc.apply_init_block(None, [], present=False) is None


def test_stock_after_init_is_recognised_and_the_users_is_not():
    assert uc.is_stock_after_init(STOCK_AFTER_INIT)
    assert uc.is_stock_after_init("#!/bin/sh\n# nothing\n")
    assert not uc.is_stock_after_init(STOCK_AFTER_INIT.replace("    # typically required\n    ;;",
                                                               "    iptables -I DOCKER-USER -j DROP\n    ;;", 1))


UFW_DOCKER_LIVE = """-N DOCKER-USER
-A DOCKER-USER -j homelab-edge-docker
-A DOCKER-USER -j ufw-user-forward
-A DOCKER-USER -s 10.0.0.0/8 -j RETURN
-A DOCKER-USER -j RETURN
"""
OURS_LIVE = """-N homelab-edge-docker
-A homelab-edge-docker -p tcp -m conntrack --ctstate NEW --ctorigdstport 443 -m connlimit --connlimit-above 100 \
--connlimit-mask 32 --connlimit-saddr -j REJECT --reject-with tcp-reset
""".replace("\\\n", "")


def test_docker_user_state():
    state = uc.docker_user_state(UFW_DOCKER_LIVE, OURS_LIVE)
    assert state == {"jump_first": True, "jump_position": 1, "ports": {443: 100},
                     "other_rules": ["-A DOCKER-USER -j ufw-user-forward", "-A DOCKER-USER -s 10.0.0.0/8 -j RETURN",
                                     "-A DOCKER-USER -j RETURN"]}
    late = UFW_DOCKER_LIVE.replace("-A DOCKER-USER -j homelab-edge-docker\n", "") + "-A DOCKER-USER -j homelab-edge-docker\n"
    assert uc.docker_user_state(late, OURS_LIVE)["jump_first"] is False  # behind a RETURN it protects nothing
    assert uc.docker_user_state(late, OURS_LIVE)["jump_position"] == 4
    assert uc.docker_user_state("-N DOCKER-USER\n", "")["jump_position"] is None


@pytest.mark.parametrize("info, backend", [
    ({"ServerVersion": "20.10.24"}, "iptables"),
    ({"ServerVersion": "28.3.0", "FirewallBackend": {"Driver": "iptables"}}, "iptables"),
    ({"ServerVersion": "29.0.0", "FirewallBackend": {"Driver": "nftables"}}, "nftables"),
    ({}, "iptables"),
])
def test_docker_firewall_backend(info, backend):
    assert uc.firewall_backend(info) == backend


def test_block_goes_before_commit_and_keeps_every_other_byte():
    out = uc.apply_block(BEFORE, block())
    lines = out.split("\n")
    commit = lines.index("COMMIT")
    assert lines[commit - 1].startswith(uc.COMMIT_COMMENT)
    assert lines[commit - 2] == uc.END and lines[commit - 5] == uc.BEGIN
    # removing the block gives the original back, byte for byte
    assert uc.apply_block(out, [], present=False) == BEFORE


def test_idempotent_and_rewritten_on_change():
    once = uc.apply_block(BEFORE, block())
    assert uc.apply_block(once, block()) == once
    changed = uc.apply_block(once, block(ports=[443], limit=20))
    assert changed.count(uc.BEGIN) == 1 and "--connlimit-above 20 " in changed and "--dport 80 -m" not in changed


def test_absent_without_block_changes_nothing():
    assert uc.apply_block(BEFORE6, [], present=False) == BEFORE6


def test_crlf_files_keep_their_line_endings():
    crlf = BEFORE.replace("\n", "\r\n")
    out = uc.apply_block(crlf, block())
    assert "\r\n" + uc.BEGIN + "\r\n" in out and "\n" not in out.replace("\r\n", "")


@pytest.mark.parametrize("text, why", [
    (BEFORE.replace("*filter", "*nat"), "no \\*filter"),
    (BEFORE.replace("\nCOMMIT", "\n#COMMIT"), "no COMMIT"),
    (BEFORE + "-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT\n",
     "after the \\*filter COMMIT"),
    (BEFORE.replace("COMMIT", uc.BEGIN + "\nCOMMIT"), "markers are damaged"),
])
def test_bad_files_are_refused(text, why):
    with pytest.raises(uc.RulesError, match=why):
        uc.apply_block(text, block())


def test_block_after_commit_is_refused():
    moved = BEFORE + "\n".join(block()) + "\n"
    with pytest.raises(uc.RulesError):
        uc.apply_block(moved, block())


@pytest.mark.parametrize("ports, limit, n", [
    ([80, 443], 100, 0), ([], 100, 1), ([0], 100, 1), ([65536], 1, 1), ([80, 80], 1, 1),
    ([80], 0, 1), ([80], -5, 1), ([True], 10, 1),
])
def test_validate(ports, limit, n):
    assert len(uc.validate(ports, limit)) == n


NFT_COMPAT = fixture("nft_ruleset_compat.txt")
NFT_NATIVE = fixture("nft_ruleset_native.txt")


def test_nft_connlimit_ports_both_renderings():
    assert uc.nft_connlimit_ports(NFT_COMPAT, 4) == {80, 443}
    assert uc.nft_connlimit_ports(NFT_COMPAT, 6) == {443}
    assert uc.nft_connlimit_ports(NFT_NATIVE, 4) == {443}
    assert uc.nft_connlimit_ports(NFT_NATIVE, 6) == set()


def test_iptables_rules():
    saved = ("-N ufw-before-input\n-A ufw-before-input -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW "
             "-m connlimit --connlimit-above 100 --connlimit-mask 32 --connlimit-saddr -j REJECT --reject-with tcp-reset\n"
             "-A ufw-before-input -p tcp -m tcp --dport 22 -j ACCEPT\n")
    assert uc.iptables_connlimit_rules(saved, "ufw-before-input") == {443: 100}


def test_docker_published_tcp_ports():
    inspect = [
        {"Name": "/traefik", "State": {"Running": True},
         "NetworkSettings": {"Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "443"}], "53/udp": [{"HostPort": "53"}]}}},
        {"Name": "/old", "State": {"Running": False}, "NetworkSettings": {"Ports": {"80/tcp": [{"HostPort": "80"}]}}},
        {"Name": "/internal", "State": {"Running": True}, "NetworkSettings": {"Ports": {"8080/tcp": None}}},
    ]
    assert uc.docker_published_tcp_ports(inspect) == {443: ["traefik"]}


@pytest.mark.parametrize("action", ["drop", "accept", "reject", "reject with icmp type port-unreachable"])
def test_a_connlimit_rule_that_does_not_reset_is_not_ours(action):
    """Only a reject with a TCP reset gives the client a fast, clean refusal
    (and is what ufw_connlimit writes): a DROP leaves it hanging."""
    for fixture_text, family, port in ((NFT_COMPAT, 4, 443), (NFT_NATIVE, 4, 443)):
        other = fixture_text.replace("reject with tcp reset", action)
        assert port not in uc.nft_connlimit_ports(other, family)
    saved = ("-A ufw-before-input -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW -m connlimit "
             "--connlimit-above 100 --connlimit-mask 32 --connlimit-saddr -j %s\n")
    for target in ("DROP", "ACCEPT", "REJECT --reject-with icmp-port-unreachable"):
        assert uc.iptables_connlimit_rules(saved % target, "ufw-before-input") == {}


@pytest.mark.parametrize("options, counted", [
    ("--connlimit-mask 32 --connlimit-saddr", True),
    ("--connlimit-mask 0 --connlimit-saddr", False),      # every client counted together: a global limit
    ("--connlimit-mask 24 --connlimit-saddr", False),     # per /24, not per address
    ("--connlimit-mask 32 --connlimit-daddr", False),     # per destination
    ("", False),                                          # no mask read back: cannot tell
])
def test_the_read_back_counts_only_a_per_address_limit(options, counted):
    saved = ("-A ufw-before-input -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW -m connlimit "
             "--connlimit-above 100 %s -j REJECT --reject-with tcp-reset\n" % options)
    assert uc.iptables_connlimit_rules(saved, "ufw-before-input", 32) == ({443: 100} if counted else {})
