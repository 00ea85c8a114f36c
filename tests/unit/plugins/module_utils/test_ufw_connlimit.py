import pytest

from ansible_collections.homelab.edge.plugins.module_utils import ufw_connlimit as uc

from ...conftest import fixture

BEFORE = fixture("before.rules")
BEFORE6 = fixture("before6.rules")


def block(family=4, ports=(80, 443), limit=100, docker=()):
    return uc.render_block(family, list(ports), limit, set(docker))


def test_render_block_ipv4_and_ipv6():
    b4 = block(4)
    assert b4[0] == uc.BEGIN and b4[-1] == uc.END
    assert b4[1] == ("-A ufw-before-input -p tcp --dport 80 -m conntrack --ctstate NEW -m connlimit "
                     "--connlimit-above 100 --connlimit-mask 32 -j REJECT --reject-with tcp-reset")
    b6 = block(6, ports=[443], limit=50)
    assert b6[1].startswith("-A ufw6-before-input -p tcp --dport 443 ")
    assert "--connlimit-above 50 --connlimit-mask 128" in b6[1]


def test_docker_published_port_goes_to_docker_user():
    b = block(4, ports=[80, 443], docker=[443])
    assert b[1] == ":DOCKER-USER - [0:0]"
    assert b[2].startswith("-A ufw-before-input -p tcp --dport 80 ")
    assert b[3].startswith("-A DOCKER-USER -p tcp -m conntrack --ctstate NEW --ctorigdstport 443 ")


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
