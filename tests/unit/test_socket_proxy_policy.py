"""autoheal's socket-proxy policy (roles/autoheal/templates/socket-proxy.cfg.j2),
read as haproxy reads it: the `http-request` rules in order, the first that
matches decides. What autoheal needs passes; everything else that can start,
change, pause or run a container is refused. The Molecule NAS scenario asks
the real haproxy the same table."""
import os
import re

import jinja2
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATE = os.path.join(ROOT, "roles", "autoheal", "templates", "socket-proxy.cfg.j2")
RULE = re.compile(r"^\s*http-request (allow|deny)(?: if METH_(\w+) \{ path,url_dec -m reg -i (\S+) \})?\s*$")

# (method, path, allowed): one home for the table, used by the Molecule NAS test too
POLICY_TABLE = [
    ("GET", "/containers/json", True),
    ("GET", "/v1.41/containers/json", True),
    ("POST", "/containers/site/restart", True),
    ("POST", "/v1.41/containers/site/restart", True),
] + [(m, p, False) for m, p in (
    ("POST", "/containers/site/start"), ("POST", "/containers/site/stop"), ("POST", "/containers/site/kill"),
    ("POST", "/containers/site/pause"), ("POST", "/containers/site/unpause"), ("POST", "/containers/site/update"),
    ("POST", "/containers/site/exec"), ("POST", "/exec/x/start"), ("POST", "/containers/create"),
    ("DELETE", "/containers/site"), ("GET", "/containers/site/json"), ("GET", "/images/json"), ("GET", "/info"),
    ("POST", "/containers/site/rename"), ("PUT", "/containers/site/archive"), ("POST", "/containers/prune"))]


def rules():
    text = jinja2.Template(open(TEMPLATE).read()).render(ansible_managed="managed")
    out = []
    for line in text.splitlines():
        m = RULE.match(line)
        if m:
            out.append((m.group(1), m.group(2), re.compile(m.group(3), re.I) if m.group(3) else None))
        else:
            assert not line.strip().startswith("http-request"), "a rule this test cannot read: %r" % line
    return out


def allowed(method, path):
    for action, meth, regex in rules():
        if (meth is None or meth == method) and (regex is None or regex.search(path)):
            return action == "allow"
    return True  # haproxy forwards what no rule refuses


def test_the_policy_ends_in_a_deny():
    assert rules()[-1] == ("deny", None, None)


@pytest.mark.parametrize("method, path, expect", POLICY_TABLE)
def test_the_policy_allows_what_autoheal_needs_and_nothing_else(method, path, expect):
    assert allowed(method, path) is expect
