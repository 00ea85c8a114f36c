"""The bounds on all sources together (module_utils/ufw/total.py): the rules, their order, the sizing check, the
read-back of `iptables -S` / `iptables -L -v -x -n` / `ss -Htan` (outputs as iptables 1.8.9 (nf_tables) and ss print
them), and the user's own bounds taken over or refused."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.ufw import connlimit as ufw_connlimit
from ansible_collections.homelab.edge.plugins.module_utils.ufw import total as ufw_total

from ...conftest import fixture

BEFORE = fixture("before.rules")
BOUNDS = {"total": 400, "rate": 5, "burst": 50}

# iptables 1.8.9 (nf_tables), read back from a network namespace with the block's three rules for 443 loaded
SAVED = fixture("ufw_total_saved.txt")
LISTED = fixture("ufw_total_listed.txt")  # iptables -L -v -x -n of the same, with another's rate bound after


def test_each_port_gets_per_address_then_rate_then_total():
    block = ufw_connlimit.render_block(4, [80, 443], 100, bounds=BOUNDS)
    rules = block[1:-1]
    assert len(rules) == 6
    assert [r.split(" -m ")[2].split()[0] for r in rules[3:]] == ["connlimit", "hashlimit", "connlimit"]
    assert rules[4] == ("-A ufw-before-input -p tcp --dport 443 -m conntrack --ctstate NEW -m hashlimit "
                        "--hashlimit-above 5/sec --hashlimit-burst 50 --hashlimit-name edge-rate-443 "
                        "--hashlimit-htable-expire 10000 -m comment "
                        "--comment homelab.edge.ufw_connlimit -j REJECT --reject-with tcp-reset")
    assert rules[5] == ("-A ufw-before-input -p tcp --dport 443 -m conntrack --ctstate NEW -m connlimit "
                        "--connlimit-above 400 --connlimit-mask 0 -m comment --comment homelab.edge.ufw_connlimit "
                        "-j REJECT --reject-with tcp-reset")
    # no rule accepts: the excess of an "up to" ACCEPT would fall through to ufw's user rules, which allow the port
    assert not any("ACCEPT" in r or "upto" in r for r in rules)


def test_the_longest_rate_name_fits_hashlimit():
    assert len(ufw_total.RATE_NAME % 65535) <= 15


def test_bounds_off_leave_the_per_address_block_as_it_was():
    assert ufw_connlimit.render_block(4, [443], 100, bounds={"total": 0, "rate": 0, "burst": 50}) == \
        ufw_connlimit.render_block(4, [443], 100)


def test_the_docker_chain_and_the_nft_table_carry_the_bounds_too():
    chain = ufw_connlimit.docker_chain_rules(6, [443], 100, BOUNDS).splitlines()
    assert [ln for ln in chain if "--ctorigdstport 443" in ln and "hashlimit-above 5/sec" in ln]
    assert [ln for ln in chain if "--connlimit-mask 0" in ln and "--connlimit-above 400" in ln]
    table = ufw_connlimit.docker_nft_rules([443], 100, True, BOUNDS)
    assert "ct original proto-dst 443 ct state new limit rate over 5/second burst 50 packets reject with tcp reset" in table
    assert "ct original proto-dst 443 ct state new ct count over 400 reject with tcp reset" in table
    assert table.index("limit rate over") > table.index("ip6 saddr ct count over 100")  # after the per-address ones


@pytest.mark.parametrize("total, rate, burst, limit, timeout, problem", [
    (400, 5, 50, 100, 60, None),
    (0, 0, 50, 100, 60, None),
    (400, 0, 50, 100, 60, None),
    (400, 6, 50, 100, 60, "half-open"),      # 50 + 6 x 60 = 410
    (400, 6, 50, 100, 30, None),             # a shorter syn_recv timeout makes room
    (100, 0, 50, 100, 60, "one address alone"),
    (-1, 0, 50, 100, 60, "total must be"),
    (400, 5, 0, 100, 60, "burst must be"),
    (400, True, 50, 100, 60, "rate must be"),
])
def test_the_sizing_check(total, rate, burst, limit, timeout, problem):
    problems = ufw_total.validate(total, rate, burst, limit, timeout)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_the_live_bounds_are_read_back_from_iptables_save():
    assert ufw_total.live_bounds(SAVED, "ufw-before-input") == {443: {"total": 400, "rate": 5, "burst": 50}}
    assert ufw_total.bounds_live(BOUNDS, {443: {"total": 400, "rate": 5, "burst": 50}}, [443]) == []
    assert ufw_total.bounds_live(BOUNDS, {443: {"total": 400}}, [443, 80]) == [443, 80]
    assert ufw_total.bounds_live({"total": 400, "rate": 5, "burst": 60}, {443: {"total": 400, "rate": 5, "burst": 50}},
                                 [443]) == [443]
    assert ufw_total.bounds_live({"total": 0, "rate": 0, "burst": 50}, {}, [443]) == []
    # the per-address read-back never takes the total for a per-address limit
    assert ufw_connlimit.iptables_connlimit_rules(SAVED, "ufw-before-input") == {443: 100}


def test_the_counters_tell_the_three_bounds_apart():
    # the per-source rate rule (mode srcip) at the end is not a bound of all sources: left out
    assert ufw_total.counters(LISTED) == {443: {"address": 12, "rate": 3100, "total": 250}}


def test_the_count_the_total_holds_as_sockets_show_it():
    ss = ("LISTEN 0 511 0.0.0.0:443 0.0.0.0:*\n"
          "ESTAB 0 0 10.0.0.1:443 198.51.100.7:50000\n"
          "SYN-RECV 0 0 10.0.0.1:443 198.51.100.8:50001\n"
          "CLOSE-WAIT 1 0 10.0.0.1:443 198.51.100.9:50002\n"
          "TIME-WAIT 0 0 10.0.0.1:443 198.51.100.9:50003\n"
          "ESTAB 0 0 10.8.0.1:41000 10.8.0.2:443\n"        # nginx's own upstream connection: not a client's
          "ESTAB 0 0 [::ffff:10.0.0.1]:80 [::ffff:198.51.100.7]:50004\n")
    assert ufw_total.counted_connections(ss, [80, 443]) == {80: 1, 443: 3}


@pytest.mark.parametrize("rule_text, kind", [
    ("-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 2000 --connlimit-mask 0 -j REJECT "
     "--reject-with tcp-reset", "total"),
    ("-A ufw-before-input -p tcp --dport 443 -m conntrack --ctstate NEW -m connlimit --connlimit-above 2000 "
     "--connlimit-mask 0 --connlimit-saddr -j DROP", "total"),
    ("-A ufw-before-input -p tcp --dport 443 -m hashlimit --hashlimit-above 20/sec --hashlimit-burst 20 "
     "--hashlimit-name tot -j REJECT", "rate"),
    # per source, from one network, accepting, or another chain: not the module's shape
    ("-A ufw-before-input -p tcp --dport 443 -m hashlimit --hashlimit-above 20/sec --hashlimit-mode srcip "
     "--hashlimit-name x -j DROP", None),
    ("-A ufw-before-input -s 10.0.0.0/8 -p tcp --dport 443 -m connlimit --connlimit-above 9 --connlimit-mask 0 -j DROP",
     None),
    ("-A ufw-before-input -p tcp --dport 443 -m hashlimit --hashlimit-upto 20/sec --hashlimit-name x -j ACCEPT", None),
    ("-A ufw-user-input -p tcp --dport 443 -m connlimit --connlimit-above 9 --connlimit-mask 0 -j DROP", None),
])
def test_a_users_own_bound_of_the_modules_shape(rule_text, kind):
    assert ufw_total.bound_shaped(rule_text, "ufw-before-input") == kind


def test_a_users_total_is_taken_over_when_the_module_writes_one_and_refused_when_not():
    rule_text = ("-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 2000 --connlimit-mask 0 "
                 "-j REJECT --reject-with tcp-reset")
    text = BEFORE.replace("# don't delete the 'COMMIT'", rule_text + "\n# don't delete the 'COMMIT'")
    plan = ufw_connlimit.plan_before_rules(text, 4, [80, 443], 100, bounds=BOUNDS)
    assert [f["rule"] for f in plan["replaced"]] == [rule_text] and not plan["refused"]
    assert ufw_connlimit.kept_lines(plan["text"]) == [rule_text]
    # state=absent puts it back where the block stood
    assert ufw_connlimit.plan_before_rules(plan["text"], 4, [80, 443], 100, present=False)["text"] == text
    # with no total asked, the module does not remove the user's: it refuses, as any other limit on the port
    plan = ufw_connlimit.plan_before_rules(text, 4, [80, 443], 100, bounds={"total": 0, "rate": 5, "burst": 50})
    assert plan["text"] == text and [f["rule"] for f in plan["refused"]] == [rule_text]


def test_the_per_address_counter_never_counts_the_total():
    """diagnose's "one address floods" reads the per-address counter: the total's rejections (#conn src/0) are no
    address's."""
    from ansible_collections.homelab.edge.plugins.module_utils import signals
    assert signals.connlimit_counters(LISTED) == {443: 12}


# /proc/net/ipt_hashlimit/edge-rate-9443 after 30 new connections, read on this kernel in a network namespace
# (rate 4/sec, burst 100, htable-expire 26000): expires, addresses, credit, credit cap, cost
BUCKET = "26 0.0.0.0:0->0.0.0.0:0 2414527526336096 3435973825000000 34359738250000\n"


def test_the_rate_bounds_bucket_read_from_the_kernel():
    assert ufw_total.bucket(BUCKET, 100) == {"tokens": 70, "size": 100, "full": False}
    assert ufw_total.bucket("", 100) == {"tokens": 100, "size": 100, "full": True}   # expired: full again
    assert ufw_total.bucket("26 0.0.0.0:0->0.0.0.0:0 x y z\n", 100) is None
    assert ufw_total.bucket("26 0.0.0.0:0->0.0.0.0:0 1 2 0\n", 100) is None
    assert ufw_total.bucket_path(4, 443) == "/proc/net/ipt_hashlimit/" + ufw_total.RATE_NAME % 443
    assert ufw_total.bucket_path(6, 443).startswith("/proc/net/ip6t_hashlimit/")
