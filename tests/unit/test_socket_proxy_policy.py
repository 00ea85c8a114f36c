"""autoheal's socket-proxy policy (roles/autoheal/templates/socket-proxy.cfg.j2),
read as haproxy reads it: the `http-request` rules in order, the first that
matches decides. What autoheal needs passes; everything else that can start,
change, pause or run a container is refused. The Molecule NAS scenario asks
the real haproxy the same table."""
import os
import re

import jinja2
import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATE = os.path.join(ROOT, "roles", "autoheal", "templates", "socket-proxy.cfg.j2")
with open(os.path.join(ROOT, "roles", "autoheal", "defaults", "main.yml")) as f:
    DEFAULTS = yaml.safe_load(f)
ACL = re.compile(r"^\s*acl (\w+) path,url_dec -m reg -i (\S+)\s*$")
COND = r"if METH_(\w+) (?:\{ path,url_dec -m reg -i (\S+) \}|(\w+))"
RULE = re.compile(r"^\s*http-request (allow|deny)(?: deny_status (\d+))?(?: %s)?"
                  r"(?: \{ sc0_gpc0_rate\(restarts\) ge (\d+) \})?\s*$" % COND)
TRACK = re.compile(r"^\s*http-request (track-sc0 path table restarts|sc-inc-gpc0\(0\)) %s\s*$" % COND)

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


def rules(limit=None):
    """The frontend's http-request rules in order: (action, method, regex, status, limit), action one of allow,
    deny, track, count."""
    limit = DEFAULTS["autoheal_restart_limit"] if limit is None else limit
    text = jinja2.Environment(trim_blocks=True).from_string(open(TEMPLATE).read()).render(
        ansible_managed="managed", autoheal_restart_limit=limit,
        autoheal_restart_window=DEFAULTS["autoheal_restart_window"])
    acls, out = {}, []
    for line in text.splitlines():
        acl, rule, track = ACL.match(line), RULE.match(line), TRACK.match(line)
        if acl:
            acls[acl.group(1)] = re.compile(acl.group(2), re.I)
        elif rule:
            action, status, meth, regex, name, above = rule.groups()
            out.append((action, meth, re.compile(regex, re.I) if regex else acls[name] if name else None,
                        int(status) if status else None, int(above) if above else None))
        elif track:
            kind, meth, regex, name = track.groups()
            out.append(("track" if kind.startswith("track") else "count", meth,
                        re.compile(regex, re.I) if regex else acls[name], None, None))
        else:
            assert not line.strip().startswith(("http-request", "acl")), "a rule this test cannot read: %r" % line
    return out


def answer(method, path, counts=None, limit=None):
    """What the proxy answers (204 passed on, 403 or 429 refused), as haproxy runs the rules: the first allow or
    deny decides; `counts` holds the restarts counted per tracked path (one window, none expired)."""
    counts = {} if counts is None else counts
    for action, meth, regex, status, above in rules(limit):
        if not ((meth is None or meth == method) and (regex is None or regex.search(path))):
            continue
        if action == "track":
            counts.setdefault(path, 0)
        elif action == "count":
            counts[path] += 1
        elif above is None or counts.get(path, 0) >= above:
            return 204 if action == "allow" else status or 403
    return 204  # haproxy forwards what no rule refuses


def allowed(method, path):
    return answer(method, path) == 204


def test_the_policy_ends_in_a_deny():
    assert rules()[-1] == ("deny", None, None, None, None)
    assert rules(0)[-1] == ("deny", None, None, None, None)


@pytest.mark.parametrize("method, path, expect", POLICY_TABLE)
def test_the_policy_allows_what_autoheal_needs_and_nothing_else(method, path, expect):
    assert allowed(method, path) is expect


@pytest.mark.parametrize("limit", [DEFAULTS["autoheal_restart_limit"], 1, 0])
def test_the_guard_refuses_a_containers_restarts_past_the_limit_and_only_its_own(limit):
    counts = {}
    loop = [answer("POST", "/containers/aaaa/restart", counts, limit) for i in range(limit + 2)]
    if limit:
        assert loop == [204] * limit + [429, 429]
    else:
        assert loop == [204] * 2
    assert answer("POST", "/containers/bbbb/restart", counts, limit) == 204
    assert answer("POST", "/containers/bbbb/start", counts, limit) == 403
    assert answer("GET", "/containers/json", counts, limit) == 204
