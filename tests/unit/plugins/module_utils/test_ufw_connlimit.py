import pytest

from ansible_collections.homelab.edge.plugins.module_utils.ufw import connlimit as ufw_connlimit

from ...conftest import fixture

BEFORE = fixture("before.rules")
BEFORE6 = fixture("before6.rules")


def block(family=4, ports=(80, 443), limit=100):
    return ufw_connlimit.render_block(family, list(ports), limit)


def test_render_block_ipv4_and_ipv6():
    b4 = block(4)
    assert b4[0] == ufw_connlimit.BEGIN and b4[-1] == ufw_connlimit.END
    assert b4[1] == ("-A ufw-before-input -p tcp --dport 80 -m conntrack --ctstate NEW -m connlimit "
                     "--connlimit-above 100 --connlimit-mask 32 -m comment --comment homelab.edge.ufw_connlimit "
                     "-j REJECT --reject-with tcp-reset")
    b6 = block(6, ports=[443], limit=50)
    assert b6[1].startswith("-A ufw6-before-input -p tcp --dport 443 ")
    assert "--connlimit-above 50 --connlimit-mask 128" in b6[1]


def test_docker_published_ports_get_a_chain_of_their_own():
    text = ufw_connlimit.docker_chain_rules(4, [443], 100)
    lines = text.splitlines()
    assert lines[1:3] == ["*filter", ":homelab-edge-docker - [0:0]"] and lines[-1] == "COMMIT"
    assert lines[3] == ("-A homelab-edge-docker -p tcp -m conntrack --ctstate NEW --ctorigdstport 443 -m connlimit "
                        "--connlimit-above 100 --connlimit-mask 32 -m comment --comment homelab.edge.ufw_connlimit "
                        "-j REJECT --reject-with tcp-reset")
    # DOCKER-USER is never declared: declaring it would flush Docker's, ufw-docker's and the admin's rules
    assert "DOCKER-USER" not in text
    assert "--connlimit-mask 128" in ufw_connlimit.docker_chain_rules(6, [443], 100)


def test_hook_puts_one_jump_first_and_never_fails_ufw():
    hook = ufw_connlimit.hook_script("/etc/ufw")
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
    out = ufw_connlimit.apply_init_block(STOCK_AFTER_INIT, ufw_connlimit.init_call("/etc/ufw"))
    lines = out.split("\n")
    assert lines[4] == ufw_connlimit.BEGIN and lines[6] == ufw_connlimit.END and lines[7] == "set -e"
    assert lines[5] == '[ -x /etc/ufw/homelab-edge.init ] && /etc/ufw/homelab-edge.init "$1" || true'
    assert ufw_connlimit.apply_init_block(out, ufw_connlimit.init_call("/etc/ufw")) == out
    assert ufw_connlimit.apply_init_block(out, [], present=False) == STOCK_AFTER_INIT
    assert ufw_connlimit.apply_init_block(None, ufw_connlimit.init_call("/etc/ufw")).startswith("#!/bin/sh\n" + ufw_connlimit.BEGIN)
    assert ufw_connlimit.apply_init_block(None, [], present=False) is None


def test_stock_after_init_is_recognised_and_the_users_is_not():
    assert ufw_connlimit.is_stock_after_init(STOCK_AFTER_INIT)
    assert ufw_connlimit.is_stock_after_init("#!/bin/sh\n# nothing\n")
    assert not ufw_connlimit.is_stock_after_init(STOCK_AFTER_INIT.replace("    # typically required\n    ;;",
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
    state = ufw_connlimit.docker_user_state(UFW_DOCKER_LIVE, OURS_LIVE)
    assert state == {"jump_first": True, "jump_position": 1, "ports": {443: 100},
                     "other_rules": ["-A DOCKER-USER -j ufw-user-forward", "-A DOCKER-USER -s 10.0.0.0/8 -j RETURN",
                                     "-A DOCKER-USER -j RETURN"]}
    late = UFW_DOCKER_LIVE.replace("-A DOCKER-USER -j homelab-edge-docker\n", "") + "-A DOCKER-USER -j homelab-edge-docker\n"
    assert ufw_connlimit.docker_user_state(late, OURS_LIVE)["jump_first"] is False  # behind a RETURN it protects nothing
    assert ufw_connlimit.docker_user_state(late, OURS_LIVE)["jump_position"] == 4
    assert ufw_connlimit.docker_user_state("-N DOCKER-USER\n", "")["jump_position"] is None


@pytest.mark.parametrize("info, backend", [
    ({"ServerVersion": "20.10.24"}, "iptables"),
    ({"ServerVersion": "28.3.0", "FirewallBackend": {"Driver": "iptables"}}, "iptables"),
    ({"ServerVersion": "29.0.0", "FirewallBackend": {"Driver": "nftables"}}, "nftables"),
    ({}, "iptables"),
])
def test_docker_firewall_backend(info, backend):
    assert ufw_connlimit.firewall_backend(info) == backend


def test_block_goes_before_commit_and_keeps_every_other_byte():
    out = ufw_connlimit.apply_block(BEFORE, block())
    lines = out.split("\n")
    commit = lines.index("COMMIT")
    assert lines[commit - 1].startswith(ufw_connlimit.COMMIT_COMMENT)
    assert lines[commit - 2] == ufw_connlimit.END and lines[commit - 5] == ufw_connlimit.BEGIN
    # removing the block gives the original back, byte for byte
    assert ufw_connlimit.apply_block(out, [], present=False) == BEFORE


def test_idempotent_and_rewritten_on_change():
    once = ufw_connlimit.apply_block(BEFORE, block())
    assert ufw_connlimit.apply_block(once, block()) == once
    changed = ufw_connlimit.apply_block(once, block(ports=[443], limit=20))
    assert changed.count(ufw_connlimit.BEGIN) == 1 and "--connlimit-above 20 " in changed and "--dport 80 -m" not in changed


def test_absent_without_block_changes_nothing():
    assert ufw_connlimit.apply_block(BEFORE6, [], present=False) == BEFORE6


def test_crlf_files_keep_their_line_endings():
    crlf = BEFORE.replace("\n", "\r\n")
    out = ufw_connlimit.apply_block(crlf, block())
    assert "\r\n" + ufw_connlimit.BEGIN + "\r\n" in out and "\n" not in out.replace("\r\n", "")


@pytest.mark.parametrize("text, why", [
    (BEFORE.replace("*filter", "*nat"), "no \\*filter"),
    (BEFORE.replace("\nCOMMIT", "\n#COMMIT"), "no COMMIT"),
    (BEFORE + "-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT\n",
     "after the \\*filter COMMIT"),
    (BEFORE.replace("COMMIT", ufw_connlimit.BEGIN + "\nCOMMIT"), "markers are damaged"),
])
def test_bad_files_are_refused(text, why):
    with pytest.raises(ufw_connlimit.RulesError, match=why):
        ufw_connlimit.apply_block(text, block())


def test_block_after_commit_is_refused():
    moved = BEFORE + "\n".join(block()) + "\n"
    with pytest.raises(ufw_connlimit.RulesError):
        ufw_connlimit.apply_block(moved, block())


@pytest.mark.parametrize("ports, limit, n", [
    ([80, 443], 100, 0), ([], 100, 1), ([0], 100, 1), ([65536], 1, 1), ([80, 80], 1, 1),
    ([80], 0, 1), ([80], -5, 1), ([True], 10, 1),
])
def test_validate(ports, limit, n):
    assert len(ufw_connlimit.validate(ports, limit)) == n


NFT_COMPAT = fixture("nft_ruleset_compat.txt")
NFT_NATIVE = fixture("nft_ruleset_native.txt")


def test_nft_connlimit_ports_both_renderings():
    assert ufw_connlimit.nft_connlimit_ports(NFT_COMPAT, 4) == {80, 443}
    assert ufw_connlimit.nft_connlimit_ports(NFT_COMPAT, 6) == {443}
    assert ufw_connlimit.nft_connlimit_ports(NFT_NATIVE, 4) == {443}
    assert ufw_connlimit.nft_connlimit_ports(NFT_NATIVE, 6) == set()


def test_iptables_rules():
    saved = ("-N ufw-before-input\n-A ufw-before-input -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW "
             "-m connlimit --connlimit-above 100 --connlimit-mask 32 --connlimit-saddr -j REJECT --reject-with tcp-reset\n"
             "-A ufw-before-input -p tcp -m tcp --dport 22 -j ACCEPT\n")
    assert ufw_connlimit.iptables_connlimit_rules(saved, "ufw-before-input") == {443: 100}


def test_docker_published_tcp_ports():
    inspect = [
        {"Name": "/traefik", "State": {"Running": True},
         "NetworkSettings": {"Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "443"}], "53/udp": [{"HostPort": "53"}]}}},
        {"Name": "/old", "State": {"Running": False}, "NetworkSettings": {"Ports": {"80/tcp": [{"HostPort": "80"}]}}},
        {"Name": "/internal", "State": {"Running": True}, "NetworkSettings": {"Ports": {"8080/tcp": None}}},
    ]
    assert ufw_connlimit.docker_published_tcp_ports(inspect) == {443: ["traefik"]}


@pytest.mark.parametrize("action", ["drop", "accept", "reject", "reject with icmp type port-unreachable"])
def test_a_connlimit_rule_that_does_not_reset_is_not_ours(action):
    """Only a reject with a TCP reset gives the client a fast, clean refusal
    (and is what ufw_connlimit writes): a DROP leaves it hanging."""
    for fixture_text, family, port in ((NFT_COMPAT, 4, 443), (NFT_NATIVE, 4, 443)):
        other = fixture_text.replace("reject with tcp reset", action)
        assert port not in ufw_connlimit.nft_connlimit_ports(other, family)
    saved = ("-A ufw-before-input -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW -m connlimit "
             "--connlimit-above 100 --connlimit-mask 32 --connlimit-saddr -j %s\n")
    for target in ("DROP", "ACCEPT", "REJECT --reject-with icmp-port-unreachable"):
        assert ufw_connlimit.iptables_connlimit_rules(saved % target, "ufw-before-input") == {}


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
    assert ufw_connlimit.iptables_connlimit_rules(saved, "ufw-before-input", 32) == ({443: 100} if counted else {})


# ---------------------------------------------------------------- what the user already has (issue 50)

SEED_RULES = ("# Simultaneous connection limit per IP\n"
              "-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset\n"
              "-A ufw-before-input -p tcp --dport 80 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset\n")


def seed_applied(text):
    """What seed 001's python does to before.rules (its replace before ufw's COMMIT comment)."""
    if "connlimit" in text:
        return text
    return text.replace("# don't delete the 'COMMIT'", SEED_RULES + "# don't delete the 'COMMIT'")


def test_the_seeds_lines_are_replaced_kept_in_the_block_and_put_back():
    seed = seed_applied(BEFORE)
    plan = ufw_connlimit.plan_before_rules(seed, 4, [80, 443], 200)
    assert [f["line"] for f in plan["replaced"]] == [75, 76] and not plan["refused"]
    lines = plan["text"].split("\n")
    live = [ln for ln in lines if ln.startswith("-A") and "connlimit" in ln]
    # one limit per port: the block's
    assert len(live) == 2 and all("--connlimit-above 200 " in ln and ufw_connlimit.TAG in ln for ln in live)
    assert ufw_connlimit.kept_lines(plan["text"]) == SEED_RULES.rstrip("\n").split("\n")
    # the seed's script sees 'connlimit' and adds nothing again; the next run changes nothing
    assert seed_applied(plan["text"]) == plan["text"]
    assert ufw_connlimit.plan_before_rules(plan["text"], 4, [80, 443], 200)["text"] == plan["text"]
    # a new limit keeps what was kept
    assert ufw_connlimit.kept_lines(ufw_connlimit.plan_before_rules(plan["text"], 4, [443], 50)["text"]) == ufw_connlimit.kept_lines(plan["text"])
    # state=absent: the user's lines back, byte for byte
    assert ufw_connlimit.plan_before_rules(plan["text"], 4, [80, 443], 200, present=False)["text"] == seed


@pytest.mark.parametrize("rule_text, seed", [
    ("-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset", True),
    ("-A ufw-before-input -p tcp -m tcp --dport 443 -m conntrack --ctstate NEW -m connlimit --connlimit-above 20 "
     "--connlimit-mask 32 -j DROP", True),
    ("-A ufw-before-input -p tcp --dport 443 -m state --state NEW -m connlimit --connlimit-above 20 -j REJECT", True),
    # another shape: a source, an interface, a global count, a mask per /24, another chain, a rate
    ("-A ufw-before-input -s 10.0.0.0/8 -p tcp --dport 443 -m connlimit --connlimit-above 100 -j DROP", False),
    ("-A ufw-before-input -i eth0 -p tcp --dport 443 -m connlimit --connlimit-above 100 -j DROP", False),
    ("-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 --connlimit-mask 0 -j DROP", False),
    ("-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 --connlimit-mask 24 -j DROP", False),
    ("-A ufw-user-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j DROP", False),
    ("-A ufw-before-input -p tcp --dport 443 -m hashlimit --hashlimit-above 10/sec --hashlimit-name x -j DROP", False),
    ("-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-upto 100 -j ACCEPT", False),
])
def test_only_the_seeds_shape_is_replaced(rule_text, seed):
    text = BEFORE.replace("# don't delete the 'COMMIT'", rule_text + "\n# don't delete the 'COMMIT'")
    plan = ufw_connlimit.plan_before_rules(text, 4, [80, 443], 200)
    if seed:
        assert len(plan["replaced"]) == 1 and not plan["refused"]
    else:
        assert plan["text"] == text and not plan["replaced"]
        assert plan["refused"] == [{"line": 74, "rule": rule_text, "ports": [443], "seed": False}]


@pytest.mark.parametrize("rule_text, ports", [
    ("-A ufw-before-input -p tcp -m multiport --dports 80,443 -m connlimit --connlimit-above 9 -j DROP", [80, 443]),
    ("-A ufw-before-input -p tcp -m multiport --dports 400:500 -m connlimit --connlimit-above 9 -j DROP", [443]),
    ("-A ufw-before-input -p tcp -m connlimit --connlimit-above 9 -j DROP", [80, 443]),   # every port
    ("-A ufw-before-input -p tcp ! --dport 22 -m connlimit --connlimit-above 9 -j DROP", [80, 443]),
    ("-A ufw-before-input -p tcp --dport 8443 -m connlimit --connlimit-above 9 -j DROP", []),
    ("-A ufw-before-input -p udp --dport 443 -m connlimit --connlimit-above 9 -j DROP", []),   # QUIC's port
    ("# -A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 9 -j DROP", []),  # a comment
])
def test_which_ports_a_users_limit_covers(rule_text, ports):
    text = BEFORE.replace("# don't delete the 'COMMIT'", rule_text + "\n# don't delete the 'COMMIT'")
    assert [p for f in ufw_connlimit.file_limits(text, [80, 443]) for p in f["ports"]] == ports


def test_a_seed_shaped_line_outside_before_rules_or_after_commit_is_not_replaced():
    line = "-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset"
    # in after.rules (or a family that is not the file's) it is refused, never moved
    assert [f["seed"] for f in ufw_connlimit.file_limits(BEFORE.replace("COMMIT\n", line + "\nCOMMIT\n"), [443], None)] == [False]
    assert [f["seed"] for f in ufw_connlimit.file_limits(BEFORE6.replace("COMMIT\n", line + "\nCOMMIT\n"), [443], 6)] == [False]


OURS = ("-m conntrack --ctstate NEW -m connlimit --connlimit-above 200 --connlimit-mask 32 --connlimit-saddr "
        "-m comment --comment homelab.edge.ufw_connlimit -j REJECT --reject-with tcp-reset")
IPT_S = "\n".join([
    "-P INPUT DROP",
    "-N ufw-before-input",
    "-A ufw-before-input -p tcp -m tcp --dport 443 -m connlimit --connlimit-above 100 --connlimit-mask 32 "
    "--connlimit-saddr -j REJECT --reject-with tcp-reset",
    "-A ufw-before-input -p tcp -m tcp --dport 443 " + OURS,
    "-A ufw-before-input -p tcp -m tcp --dport 80 " + OURS,
    "-A DOCKER-USER -p tcp -m tcp --dport 80 -m hashlimit --hashlimit-above 50/sec --hashlimit-name web -j DROP", ""])


def test_every_live_limit_is_kept_and_the_smallest_is_the_effective_one():
    found = ufw_connlimit.live_limits(IPT_S, [80, 443])
    assert [(f["chain"], f["ports"], f["above"], f["ours"]) for f in found] == [
        ("ufw-before-input", [443], 100, False), ("ufw-before-input", [443], 200, True),
        ("ufw-before-input", [80], 200, True), ("DOCKER-USER", [80], None, False)]
    assert ufw_connlimit.effective_limits(found, [80, 443]) == {443: 100, 80: 200}


NFT_USERS = """table inet filter {
    set blocked { type ipv4_addr; }
    chain input {
        type filter hook input priority filter; policy accept;
        tcp dport { 80, 443 } ct state new meter perip { ip saddr ct count over 50 } counter reject with tcp reset
        tcp dport 22 ct count over 5 drop
    }
}
table inet homelab-edge-docker {
    chain forward {
        meta nfproto ipv4 ct status dnat ct original proto-dst 443 ct state new add @conn443_ip { ip saddr ct count over 200 } reject
    }
}
table ip filter {
    chain ufw-before-input {
        tcp dport 443 ct state new xt match "connlimit" counter reject with tcp reset
    }
}
"""


def test_native_nft_limits_are_found_in_any_table():
    found = ufw_connlimit.nft_limits(NFT_USERS, [80, 443])
    assert [(f["chain"], f["ports"], f["above"], f["ours"]) for f in found] == [
        ("inet filter input", [80, 443], 50, False), ("inet homelab-edge-docker forward", [443], 200, True)]
    assert ufw_connlimit.effective_limits(found, [443]) == {443: 50}


def test_the_seeds_line_for_a_docker_port_is_taken_over_too():
    """443 published by Docker: the block limits 80 only (443's limit lives in the module's chain), and the
    seed's 443 line - which never saw Docker's traffic - is kept in the block all the same."""
    plan = ufw_connlimit.plan_before_rules(seed_applied(BEFORE), 4, [80], 200, managed=[80, 443])
    assert [f["ports"] for f in plan["replaced"]] == [[443], [80]]
    live = [ln for ln in plan["text"].split("\n") if ln.startswith("-A") and "connlimit" in ln]
    assert live == block(ports=[80], limit=200)[1:-1]


def test_a_stock_before_init_with_the_reverts_block_is_still_stock():
    from ansible_collections.homelab.edge.plugins.module_utils.ufw import revert as ufw_revert
    before = STOCK_AFTER_INIT.replace("after.init", "before.init")
    hooked = ufw_revert.init_hook(before, "/var/lib/homelab-edge/ufw-revert", "before")
    assert ufw_connlimit.is_stock_after_init(hooked, "before.init") and not ufw_connlimit.is_stock_after_init(hooked)
    assert not ufw_connlimit.is_stock_after_init(hooked.replace("esac", "iptables -A INPUT -j DROP\nesac"), "before.init")


# ------------------------------------------------------------ edges no other test reached (issue 51)
MANGLE = "*mangle\n:PREROUTING ACCEPT [0:0]\n%sCOMMIT\n"


@pytest.mark.parametrize("text", [
    MANGLE % ("\n".join(block()) + "\n") + BEFORE,                    # in a section before *filter
    BEFORE + "\n" + MANGLE % ("\n".join(block()) + "\n"),             # in a section after *filter's COMMIT
    BEFORE + "\n" + "\n".join([ufw_connlimit.BEGIN, ufw_connlimit.KEPT + "# a user's line", ufw_connlimit.END]) + "\n",  # after COMMIT, no rule
], ids=["before-filter", "later-section", "after-commit-without-rules"])
def test_a_managed_block_outside_the_filter_section_is_refused(text):
    """iptables-restore would load it into another table (or ufw would not load the file at all): the block is
    refused where it stands, not rewritten in place."""
    with pytest.raises(ufw_connlimit.RulesError, match="not inside the \\*filter section"):
        ufw_connlimit.apply_block(text, block())


def test_the_docker_nft_table_is_hooked_before_dockers_own():
    """Docker's nftables backend filters forwarded traffic at priority filter (0); a table at filter + 1 would see
    connections Docker already accepted. The table's hook must come first: below filter."""
    import re
    text = ufw_connlimit.docker_nft_rules([443], 100)
    hooks = re.findall(r"type filter hook forward priority filter ([+-]) (\d+);", text)
    assert hooks and all(sign == "-" and int(n) >= 1 for sign, n in hooks), text
