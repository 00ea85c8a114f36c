"""traefik_inflight's main() with state=absent over its record in a temporary state_dir (no engine needed: the
record asks for no restart): the user's original goes back and the record goes; check mode shows that in the
diff and writes nothing; a file changed since the module wrote it is refused and nothing is put back."""
import json

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import undo_record
from ansible_collections.homelab.edge.plugins.modules import traefik_inflight as mod

from .conftest import assert_documented_as_specified

THEIRS = "entryPoints:\n  web: {}\n"
OURS = THEIRS + "# homelab.edge\n"


@pytest.fixture
def written(tmp_path, monkeypatch, commands):
    """traefik.yml as the module left it, and its record."""
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    static = tmp_path / "traefik.yml"
    static.write_text(OURS)
    (tmp_path / "state").mkdir()
    record = undo_record.remember(None, [(str(static), THEIRS, OURS)])
    (tmp_path / "state" / "traefik.json").write_text(json.dumps(record))
    return tmp_path


def absent(run_main, root, **kw):
    return run_main(mod, state="absent", container="traefik", state_dir=str(root / "state"), **kw)


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_absent_puts_the_original_back_and_forgets_the_record(run_main, written, commands):
    res = absent(run_main, written, check=True, diff=True)
    assert res["changed"] and res["diff"][0]["after"] == THEIRS and (written / "traefik.yml").read_text() == OURS
    res = absent(run_main, written)
    assert res["changed"] and res["files"] == [str(written / "traefik.yml")]
    assert (written / "traefik.yml").read_text() == THEIRS and not (written / "state" / "traefik.json").exists()
    assert commands.calls == []  # nothing to restart
    assert "nothing to undo" in absent(run_main, written)["msg"]


def test_a_file_changed_since_is_refused_and_nothing_is_put_back(run_main, written):
    (written / "traefik.yml").write_text(OURS + "# theirs again\n")
    res = absent(run_main, written)
    assert res["failed"] and "so nothing was changed" in res["msg"]
    assert (written / "traefik.yml").read_text() == OURS + "# theirs again\n"
    assert (written / "state" / "traefik.json").exists()
