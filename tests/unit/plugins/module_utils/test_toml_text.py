"""traefik.toml changed in place with the same rules as YAML: every line of
theirs kept, the result parses to the intended data, a second run changes
nothing; what cannot be edited by lines is refused with nothing written."""
import difflib
import os
import tomllib

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.traefik import toml_text
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik.text_edit import EditError, apply_changes

DOCS_STYLE = """# Static config (Traefik's docs style) - keep my comments
[global]
  checkNewVersion = false

[entryPoints]
  [entryPoints.web]
    address = ":80"
  [entryPoints.websecure]
    address = ":443"
    [entryPoints.websecure.http.tls]

[providers.file]
  filename = "/etc/traefik/dynamic.toml"   # my routes
  watch = true

[accessLog]
  format = "json"
"""
OPTS = {"name": "inflight-limit", "amount": 400, "entrypoints": ["websecure"], "http2_max_streams": 32,
        "proxy_protocol_trusted_ips": ["10.8.0.1/32"],
        "provider": {"kind": "filename", "file": "/etc/traefik/dynamic.toml", "dir": "/etc/traefik/dynamic"}}
DIRECTORY = {"kind": "directory", "dir": "/etc/traefik/dynamic"}

STYLES = [
    ("Traefik's docs style", DOCS_STYLE, OPTS, None),
    ("dotted keys", """[entryPoints.websecure]
address = ":443"
http.tls = {}
http.middlewares = ["mine@file"]
[providers]
file.directory = "/etc/traefik/dynamic"
""", dict(OPTS, provider=DIRECTORY), None),
    ("dotted keys, no list yet (the new key goes beside them)", """[entryPoints.websecure]
address = ":443"
http.tls = {}
""", dict(OPTS, provider=DIRECTORY), None),
    ("a multi-line list with a trailing comma", """[entryPoints.websecure]
  address = ":443"
  [entryPoints.websecure.http]
    middlewares = [
      "mine@file",   # mine
    ]
""", dict(OPTS, provider=DIRECTORY), None),
    ("a multi-line list without one", """[entryPoints.websecure.http]
middlewares = [
  "a@file",
  "b@file"
]
[entryPoints.websecure]
address = ":443"
""", dict(OPTS, provider=DIRECTORY), None),
    ("quoted keys and CRLF", '[entryPoints."websecure"]\r\n  "address" = ":443"\r\n', dict(OPTS, provider=DIRECTORY), None),
    ("an inline table that must grow", """[entryPoints]
websecure = { address = ":443" }
""", dict(OPTS, provider=DIRECTORY), "nothing was written"),
    ("not TOML", "[entryPoints\n", OPTS, "does not parse as TOML"),
]


def changes_for(text, opts):
    return traefik_inflight.static_changes(toml_text.parse(text, "traefik.toml"), opts)


@pytest.mark.parametrize("style, text, opts, refused", STYLES, ids=[s[0] for s in STYLES])
def test_every_toml_style_is_changed_correctly_or_refused_clearly(style, text, opts, refused):
    if refused:
        with pytest.raises(EditError, match=refused):
            toml_text.edit_toml(text, changes_for(text, opts), "traefik.toml")
        return
    changes = changes_for(text, opts)
    new = toml_text.edit_toml(text, changes, "traefik.toml")
    assert tomllib.loads(new) == apply_changes(tomllib.loads(text), changes)
    removed = [ln for ln in difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0)
               if ln.startswith("-") and not ln.startswith("---")]
    # the lines of theirs that may change: the provider's filename (now a directory), a list that took the item
    assert all("filename" in ln or "middlewares" in ln or ln.rstrip().endswith('"') for ln in removed), removed
    if "\r\n" in text:
        assert new.count("\n") == new.count("\r\n")
    mws = traefik_inflight.lookup(tomllib.loads(new), ["entryPoints", "websecure", "http", "middlewares"])
    assert mws[-1] == "inflight-limit@file"
    again = dict(opts, provider=DIRECTORY)
    assert changes_for(new, again) == []
    comments = [ln for ln in text.splitlines() if "#" in ln and "filename" not in ln]
    assert all(c in new.splitlines() or c.rstrip().endswith("# mine") for c in comments)


def test_the_docs_style_gets_new_tables_beside_their_siblings_and_keeps_every_byte_else():
    new = toml_text.edit_toml(DOCS_STYLE, changes_for(DOCS_STYLE, OPTS), "traefik.toml")
    assert '  directory = "/etc/traefik/dynamic"   # my routes\n' in new
    assert new.index("[entryPoints.websecure.http]") < new.index("[providers.file]")
    assert new.index("[entryPoints.homelab-edge-api]") < new.index("[providers.file]")
    assert "[ping]" in new and "[api]" in new


def test_a_multi_line_list_keeps_its_layout():
    text = STYLES[3][1]
    new = toml_text.edit_toml(text, changes_for(text, STYLES[3][2]), "traefik.toml")
    assert '      "mine@file",   # mine\n      "inflight-limit@file",\n    ]\n' in new
    text = STYLES[4][1]
    new = toml_text.edit_toml(text, changes_for(text, STYLES[4][2]), "traefik.toml")
    assert '  "b@file",\n  "inflight-limit@file"\n]\n' in new


def test_proxy_protocol_is_removed_again_with_its_table():
    text = STYLES[1][1]
    opts = dict(OPTS, provider=DIRECTORY)
    on = toml_text.edit_toml(text, changes_for(text, opts), "traefik.toml")
    off_opts = dict(opts, proxy_protocol_trusted_ips=[], trusted_added_before=["10.8.0.1/32"])
    off = toml_text.edit_toml(on, changes_for(on, off_opts), "traefik.toml")
    assert "proxyProtocol" not in off and "trustedIPs" not in off


# ---- a new table goes after the whole of the table before it, its commented-out options included (issue 53)

GUIDES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "traefik_guides")


def guide(case, name="traefik.toml"):
    with open(os.path.join(GUIDES, case, name), encoding="utf-8", newline="") as f:
        return f.read()


FILE_PROVIDER = ("ensure", ["providers", "file"], {"directory": "/etc/traefik/dynamic", "watch": True})
# (what, text, the change, the line the new table must come after, a commented option that must stay its table's)
TABLE_ENDS = [
    ("Traefik's v2.0 sample: [providers.docker] and its commented-out options end the file",
     guide("20-traefik-docs-v2.0-install-sample-toml"), FILE_PROVIDER, "  # exposedByDefault = false\n",
     ("  # exposedByDefault = false", ["providers", "docker", "exposedByDefault"], False)),
    ("make-my-server's TOML: no commented options, the table goes after the last key",
     guide("41-make-my-server-toml-working-dir"), ("ensure", ["providers", "consulCatalog"], {"prefix": "t"}),
     'filename = "traefik_dynamic.toml"\n', None),
    ("a comment that leads into the next table stays with it", "[providers.docker]\n  watch = true\n  # network = \"web\"\n"
     "\n# my API\n[api]\n  dashboard = true\n", FILE_PROVIDER, '  # network = "web"\n',
     ('  # network = "web"', ["providers", "docker", "network"], "web")),
]


@pytest.mark.parametrize("what, text, change, after, option", TABLE_ENDS, ids=[t[0] for t in TABLE_ENDS])
def test_a_new_table_goes_after_the_whole_table_before_it(what, text, change, after, option):
    new = toml_text.edit_toml(text, [change], "traefik.toml")
    header = "[%s]" % ".".join(change[1])
    assert new.index(after) < new.index(header), new
    assert tomllib.loads(new) == apply_changes(tomllib.loads(text), [change])
    if "# my API" in text:
        assert new.index(header) < new.index("# my API\n[api]")
    if option:
        line, path, value = option
        uncommented = new.replace(line, line.replace("# ", "", 1))
        assert traefik_inflight.lookup(tomllib.loads(uncommented), path) == value
