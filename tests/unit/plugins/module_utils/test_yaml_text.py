"""Every YAML style people write in a Traefik static config: changed
correctly (every line of theirs kept, the result parses to the intended data,
a second run changes nothing) or refused with a clear message."""
import difflib

import pytest
import yaml

from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik import yaml_text
from ansible_collections.homelab.edge.plugins.module_utils.traefik.text_edit import EditError, apply_changes

OPTS = {"name": "inflight-limit", "amount": 400, "entrypoints": ["websecure"], "http2_max_streams": 32,
        "provider": {"kind": "none", "dir": "/etc/traefik/dynamic"}}

BLOCK = """entryPoints:
  websecure:
    address: ":443"
    http:
      middlewares:
        - mine@file
providers:
  docker: {}
"""

STYLES = [
    ("block, lists indented", BLOCK, None),
    ("lists at the indent of their key", """entryPoints:
  websecure:
    address: ":443"
    http:
      middlewares:
      - mine@file
      - other@file
      tls: {}
providers:
  docker:
    exposedByDefault: false
""", None),
    ("document markers --- and ...", "---\n" + BLOCK + "...\n", None),
    ("a comment after ---", "--- # static\n" + BLOCK, None),
    ("flow list", """entryPoints:
  websecure:
    address: ":443"
    http:
      middlewares: [mine@file, "two@file"]   # mine
""", None),
    ("CRLF", BLOCK.replace("\n", "\r\n"), None),
    ("quoted keys", """"entryPoints":
  'websecure':
    "address": ":443"
""", None),
    ("comments between keys, at any indent", """# top
entryPoints:
# a comment at column 0 inside the block
  websecure:   # the main one
      # deeper comment
    address: ":443"

    # before http
    http:
      tls: {}   # default cert
# end
""", None),
    ("four-space indentation", """entryPoints:
    websecure:
        address: ":443"
""", None),
    ("an empty flow mapping to grow", """entryPoints:
  websecure:
    address: ":443"
    http: {}
""", None),
    ("merge keys from an anchor", """x-ep: &ep
  address: ":443"
entryPoints:
  websecure:
    <<: *ep
""", None),
    ("a block scalar elsewhere", """entryPoints:
  websecure:
    address: ":443"
log:
  format: |
    common
""", None),
    ("no file at all (empty)", "", "defines no entrypoint"),
    ("a flow mapping that must grow", """entryPoints:
  websecure: {address: ":443"}
""", "flow mapping"),
    ("the whole document in flow style", '{entryPoints: {websecure: {address: ":443"}}}\n', "flow mapping"),
    ("an anchor shared with another entrypoint", """entryPoints:
  websecure: &ep
    address: ":443"
  other: *ep
""", "anchors and aliases"),
    ("two documents", BLOCK + "---\nlog: {}\n", "does not parse as YAML"),
    ("a tab", "entryPoints:\n\twebsecure: {}\n", "does not parse as YAML"),
]


def changes_for(text):
    return traefik_inflight.static_changes(yaml_text.parse(text, "traefik.yml"), OPTS)


@pytest.mark.parametrize("style, text, refused", STYLES, ids=[s[0] for s in STYLES])
def test_every_yaml_style_is_changed_correctly_or_refused_clearly(style, text, refused):
    if refused:
        with pytest.raises(EditError, match=refused) as e:
            yaml_text.edit_yaml(text, changes_for(text), "traefik.yml")
        assert "nothing was" in str(e.value) or "not defined" in str(e.value)
        return
    changes = changes_for(text)
    new = yaml_text.edit_yaml(text, changes, "traefik.yml")
    assert yaml.safe_load(new) == apply_changes(yaml.safe_load(text), changes)
    removed = [ln for ln in difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0)
               if ln.startswith("-") and not ln.startswith("---")]
    # the one line of theirs that may change: a {} emptied to take keys, a flow list that took the item
    assert removed in ([], ['-    http: {}'], ['-      middlewares: [mine@file, "two@file"]   # mine']), removed
    assert ("\r\n" in new) == ("\r\n" in text) and new.count("\n") == new.count("\r\n") or "\r\n" not in text
    mws = traefik_inflight.lookup(yaml.safe_load(new), ["entryPoints", "websecure", "http", "middlewares"])
    assert mws[-1] == "inflight-limit@file" and mws.count("inflight-limit@file") == 1
    if text.rstrip().endswith("..."):
        assert new.rstrip().endswith("...")
    assert changes_for(new) == [c for c in changes_for(new) if c[0] == "ensure" and c[1] == ["providers", "file"]]


def test_a_list_at_the_indent_of_its_key_gets_the_item_at_that_indent():
    text = STYLES[1][1]
    new = yaml_text.edit_yaml(text, changes_for(text))
    assert "      - other@file\n      - inflight-limit@file\n      tls: {}\n" in new


def test_flag_items_are_edited_in_a_list_at_the_indent_of_its_key():
    text = "services:\n  traefik:\n    command:\n    - --ping=false   # off\n    - --log.level=INFO\n"
    new = yaml_text.edit_yaml(text, [("flags", ["services", "traefik", "command"], ({"ping": "true", "api": "true"}, []))])
    assert new == ("services:\n  traefik:\n    command:\n    - --ping=true   # off\n    - --log.level=INFO\n"
                   "    - --api=true\n")
