"""The module's plan on nginx stream configurations from public sources
(tests/unit/fixtures/nginx_streams/, each with its SOURCE.txt), read from
what the real nginx printed for them (nginx-T.txt: Debian 12's nginx,
tests/support/nginx_fixture_dumps.py): each server edited or refused as
case.json says, with a true reason; the edit is of the user's own bytes
(a symlink's target), runs again without change, and state=absent gives the
bytes back exactly."""
import json
import os

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_dump as dump
from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_plan as plan

from ...conftest import FIXTURES

BASE = os.path.join(FIXTURES, "nginx_streams")
NAMES = sorted(n for n in os.listdir(BASE) if os.path.isdir(os.path.join(BASE, n)))


class Fixture(object):
    def __init__(self, name):
        self.dir = os.path.join(BASE, name)
        with open(os.path.join(self.dir, "case.json")) as f:
            self.case = json.load(f)
        with open(os.path.join(self.dir, "nginx-T.txt"), "rb") as f:
            self.dump = f.read().decode("utf-8", "surrogateescape")
        self.links = {}
        if os.path.exists(os.path.join(self.dir, "links.txt")):
            with open(os.path.join(self.dir, "links.txt")) as f:
                for line in f:
                    path, target = line.strip().split(" -> ")
                    self.links["/" + path] = target

    def real(self, path):
        """Where a path of nginx's dump is in the fixture: a link's target (what the module edits)."""
        return os.path.join(self.dir, "root", self.links.get(path, path).lstrip("/"))

    def read(self, path):
        with open(self.real(path), "rb") as f:
            return f.read().decode("utf-8", "surrogateescape")


def test_there_are_at_least_25_configurations_each_with_its_source():
    assert len(NAMES) >= 25
    for name in NAMES:
        with open(os.path.join(BASE, name, "SOURCE.txt")) as f:
            source = f.read()
        assert source.startswith("Source: ") and "Adapted: " in source and "Expected: " in source, name


@pytest.mark.parametrize("name", NAMES)
def test_the_plan_on_each_public_configuration(name):
    fx = Fixture(name)
    conf = dump.load(fx.dump)
    for path in conf.files:  # the user's files are in the dump as their bytes are
        if os.path.exists(fx.real(path)):
            assert fx.read(path) == conf.files[path], path
    p = plan.Plan(conf, fx.case["upstreams"])
    assert [[s.directive.file, conf.line(s.directive), s.outcome] for s in p.servers] == fx.case["servers"]
    refusals = " | ".join(p.refusals)
    assert bool(refusals) == bool(fx.case.get("refusal"))
    for words in fx.case.get("refusal", []):
        assert words in refusals
    assert (p.nothing_forwards() or "").startswith(fx.case.get("nothing", "")) and \
        bool(p.nothing_forwards()) == ("nothing" in fx.case)
    for s in p.of(plan.UDP):  # never a UDP server, and it is said, naming the port
        assert any(w.startswith(s.name() + " is UDP (port %s" % plan.port_of(s.listens[0].address))
                   for w in p.warnings)
    if p.refusals:
        return
    edits = p.edits()
    assert sorted(edits) == sorted(set(path for path, line, outcome in fx.case["servers"] if outcome == "add"))
    new = dict((path, plan.apply_edits(fx.read(path), e)) for path, e in edits.items())
    for path, text in new.items():
        assert text.count(plan.LINE + "  " + plan.MARK) == len([1 for s in p.of(plan.ADD) if s.directive.file == path])
        assert "\r\n" not in fx.read(path) or "\n" not in text.replace("\r\n", "")
    again = dump.load(_redump(fx.dump, conf, new))
    second = plan.Plan(again, fx.case["upstreams"])
    assert second.edits() == {} and not second.refusals
    assert [s.outcome for s in second.servers] == [
        {"add": "has"}.get(outcome, outcome) for path, line, outcome in fx.case["servers"]]
    absent = plan.Plan(again, fx.case["upstreams"], present=False)
    for path, e in absent.edits().items():
        assert plan.apply_edits(again.files[path], e) == fx.read(path)


def _redump(text, conf, new):
    """nginx -T's output once the files have their new text."""
    return "".join("# configuration file %s:\n%s\n" % (path, new.get(path, body)) for path, body in dump.split_dump(text))


def test_the_links_are_edited_through_not_replaced():
    fx = Fixture("07-raspibolt-streams-enabled-symlinks")
    assert fx.real("/etc/nginx/streams-enabled/nas.conf").endswith("root/etc/nginx/streams-available/nas.conf")


def test_the_checks_go_where_clients_go():
    def checks(name):
        fx = Fixture(name)
        return plan.Plan(dump.load(fx.dump), fx.case["upstreams"]).checks()
    public, skipped = checks("14-vali0004-public-address-nas-only")
    assert [(c["host"], c["port"]) for c in public] == [("203.0.113.10", 443), ("203.0.113.10", 80)]
    behind_a_balancer = checks("04-nifoc-nixos-listen-proxy-protocol")[0]
    assert [(c["host"], c["proxy_protocol"]) for c in behind_a_balancer] == [("127.0.0.1", True)]
    tls = checks("08-raspibolt-electrs-tls-termination")[0]
    assert [(c["port"], c["tls"]) for c in tls] == [(50002, True)]
    sni = checks("29-sni-map-hostnames-include")[0]
    assert [c["sni"] for c in sni] == ["probe.example.net"]
    unix = checks("25-nginx-gateway-fabric-unix-listen")
    assert [(c["host"], c["port"]) for c in unix[0]] == [("127.0.0.1", 443), ("::1", 443)]
    assert "unix:/run/nginx/nas-tls.sock is a unix socket, not checked" in unix[1][0]
