"""Every test that needs an upstream image says so (issue 67): the check of
tests/support/image_bound.py on this checkout's Molecule and lab tests, each
real mark shown to be needed (the test without it is flagged), and crafted
tests that reach the autoheal part each way a test can."""
import ast
import json
import os
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import image_bound  # noqa: E402
import upstream_images  # noqa: E402

NEEDLES = image_bound.Needles(ROOT)
TESTS = image_bound.analyse(ROOT, needles=NEEDLES)
MARKED = [t for t in TESTS if t.marks]


def test_every_image_bound_test_is_marked_or_adapts():
    """The check CI runs: a test that uses autoheal or the socket proxy without the mark fails here, naming
    the test, what it uses and where (python tests/support/image_bound.py lists them all)."""
    bad = image_bound.problems(TESTS)
    assert not bad, "\n".join(bad)


def test_the_check_reads_the_scenarios_and_finds_their_marks():
    """It reads every scenario's tests and tests/lab, and the marks where they are (a check that reads nothing
    passes everything)."""
    read = set(os.path.dirname(t.path) for t in TESTS)
    want = set("molecule/%s/tests" % d for d in os.listdir(os.path.join(ROOT, "molecule"))
               if os.path.isdir(os.path.join(ROOT, "molecule", d, "tests")))
    assert read == want | {"tests/lab"}, read
    assert set(t.path for t in MARKED) >= {"molecule/nas/tests/test_nas.py", "molecule/default/tests/test_diagnose.py"}
    assert all(t.uses for t in MARKED)


def without_marks(path, test):
    """The file's text with the upstream_images marks of one test taken away."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    tree = ast.parse(text)
    name = test.split("::")[-1]
    fdef = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name][0]
    lines = text.splitlines(True)
    for d in sorted(fdef.decorator_list, key=lambda d: -d.lineno):
        if "needs(" in ast.get_source_segment(text, d):
            del lines[d.lineno - 1:d.end_lineno]
    return "".join(lines)


@pytest.mark.parametrize("test", MARKED, ids=[t.nodeid.split("::")[-1] for t in MARKED])
def test_each_real_mark_is_needed_the_test_without_it_fails_the_check(test):
    crafted = without_marks(test.path, test.nodeid)
    got = image_bound.analyse(ROOT, [os.path.join(ROOT, test.path)], NEEDLES, {os.path.join(ROOT, test.path): crafted})
    flagged = [p for p in image_bound.problems(got) if p.startswith(test.nodeid + " uses ")]
    assert flagged and "without @upstream_images.needs('autoheal')" in flagged[0], image_bound.problems(got)


# ---------------------------------------------------------------- crafted tests, in a checkout of their own

HELPERS = {
    "tests/support/labhelp.py": '''
        """A support module (tests/support)."""
        import upstream_images

        AUTOHEAL_DIR = "/srv/autoheal"


        def pause_healer(host):
            """Mentions autoheal only in its docstring: not a use."""
            host.check_output("docker pause %s" % container())


        def container():
            return "autoheal"


        def healer_if_any(host):
            if upstream_images.reason("autoheal") is None:
                host.check_output("docker pause autoheal")


        def traefik_logs(host):
            # autoheal: a comment is not a use
            return host.check_output("docker logs traefik")
        ''',
    "molecule/crafted/tests/conftest.py": '''
        import pytest


        @pytest.fixture
        def proxy_network():
            return "homelab-edge-autoheal_proxy"
        ''',
    "molecule/crafted/tests/sibling.py": '''
        def stock_proxy():
            return "docker run -d homelab-edge/socket-proxy:lab"
        ''',
}

CASES = {
    # name: (the test's source, image-bound and unmarked?)
    "a docker command on its container": ('''
        def test_x():
            NAS.check_output("docker pause autoheal")
        ''', True),
    "its lab image by tag": ('''
        def test_x():
            run("homelab-edge/socket-proxy:lab")
        ''', True),
    "the role by name": ('''
        def test_x():
            playbook("- hosts: nas\\n  roles: [homelab.edge.autoheal]\\n")
        ''', True),
    "the role's tag": ('''
        def test_x():
            site("--tags", "nas,autoheal")
        ''', True),
    "one of its options": ('''
        def test_x():
            prove({"autoheal_prove_wedge": True})
        ''', True),
    "its project directory in the lab's inventory": ('''
        def test_x():
            NAS.check_output("ls /srv/autoheal")
        ''', True),
    "its compose project": ('''
        def test_x():
            NAS.check_output("docker compose -p homelab-edge-autoheal ps")
        ''', True),
    "an alert of its rules": ('''
        def test_x():
            assert firing("TraefikRestartLoop")
        ''', True),
    "the socket proxy written another way": ('''
        def test_x():
            assert "Socket Proxy" in status()
        ''', True),
    "a helper of the same file": ('''
        def wedge():
            NAS.check_output("docker logs autoheal")


        def test_x():
            wedge()
        ''', True),
    "a helper's helper": ('''
        def inner():
            return "docker stop autoheal"


        def outer():
            NAS.check_output(inner())


        def test_x():
            outer()
        ''', True),
    "a constant of the file": ('''
        HEALER = "autoheal"


        def test_x():
            NAS.check_output("docker pause " + HEALER)
        ''', True),
    "a fixture of the file": ('''
        import pytest


        @pytest.fixture
        def healer():
            NAS.check_output("docker stop autoheal")
            yield


        def test_x(healer):
            pass
        ''', True),
    "an autouse fixture of the file": ('''
        import pytest


        @pytest.fixture(autouse=True)
        def healer():
            yield "autoheal"


        def test_x():
            pass
        ''', True),
    "a fixture of conftest.py": ('''
        def test_x(proxy_network):
            pass
        ''', True),
    "a parametrize argument": ('''
        import pytest


        @pytest.mark.parametrize("name", ["traefik", "autoheal"])
        def test_x(name):
            NAS.check_output("docker restart " + name)
        ''', True),
    "a function of a support module, through helpers": ('''
        import labhelp


        def test_x():
            labhelp.pause_healer(NAS)
        ''', True),
    "a constant of a support module, imported by name": ('''
        from labhelp import AUTOHEAL_DIR


        def test_x():
            NAS.check_output("ls " + AUTOHEAL_DIR)
        ''', True),
    "a sibling module imported under another name": ('''
        import sibling as base


        def test_x():
            NAS.check_output(base.stock_proxy())
        ''', True),
    "a nested function": ('''
        def test_x():
            def healed():
                return "found to be unhealthy" in NAS.check_output("docker logs autoheal")
            wait(healed)
        ''', True),
    "helpers that call each other": ('''
        def wedge(n):
            return heal(n - 1) if n else ""


        def heal(n):
            return wedge(n) + NAS.check_output("docker logs autoheal")


        def test_x():
            wedge(2)
        ''', True),
    "adapting in one helper does not cover a use elsewhere": ('''
        import labhelp


        def test_x():
            labhelp.healer_if_any(NAS)
            NAS.check_output("docker start autoheal")
        ''', True),
    "only a docstring and a comment": ('''
        import labhelp


        def test_x():
            """autoheal would heal this, but this test is about Traefik."""
            labhelp.traefik_logs(NAS)  # not autoheal
        ''', False),
    "a helper that asks what the lab has and takes both branches": ('''
        import labhelp


        def test_x():
            labhelp.healer_if_any(NAS)
        ''', False),
    "the test itself asks and takes both branches": ('''
        import upstream_images


        def test_x():
            rows = prove()
            if upstream_images.reason("autoheal") is None:
                assert rows["autoheal on a wedge"] == "skipped"
            else:
                assert "autoheal on a wedge" not in rows
        ''', False),
    "a local name that shadows a helper": ('''
        def proxy():
            return "socket-proxy:2375"


        def test_x():
            proxy = "http://127.0.0.1:8080"
            get(proxy)
        ''', False),
    "an argument named like a helper that is no fixture": ('''
        def proxy():
            return "socket-proxy:2375"


        def get(proxy):
            return proxy + "/containers/json"


        def test_x():
            get("http://127.0.0.1:8080")
        ''', False),
    "nothing of it": ('''
        def test_x():
            assert NAS.check_output("docker inspect traefik-a")
        ''', False),
}


def checkout(tmp_path, test_source, extra=None):
    files = dict(HELPERS, **(extra or {}))
    files["molecule/crafted/tests/test_crafted.py"] = 'import upstream_images\n\n' + textwrap.dedent(test_source)
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return str(tmp_path / "molecule/crafted/tests/test_crafted.py")


def crafted(tmp_path, source, extra=None):
    path = checkout(tmp_path, source, extra)
    return image_bound.problems(image_bound.analyse(str(tmp_path), [path], NEEDLES))


def marked(source):
    return textwrap.dedent(source).replace("def test_x", "@upstream_images.needs(\"autoheal\")\ndef test_x", 1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_crafted_test_is_flagged_unmarked_and_passes_marked(tmp_path, case):
    source, bound = CASES[case]
    unmarked = crafted(tmp_path / "unmarked", source)
    if bound:
        assert len(unmarked) == 1 and "test_x uses autoheal without @upstream_images.needs('autoheal')" in unmarked[0], \
            unmarked
        assert crafted(tmp_path / "marked", marked(source)) == []
    else:
        assert unmarked == []


def test_the_message_says_what_the_test_uses_where_and_by_which_way(tmp_path):
    got = crafted(tmp_path, CASES["a function of a support module, through helpers"][0])
    assert "'autoheal'" in got[0] and "tests/support/labhelp.py:" in got[0], got
    assert "via labhelp.pause_healer -> container" in got[0], got


def test_a_mark_on_a_test_that_uses_nothing_of_it_is_flagged(tmp_path):
    got = crafted(tmp_path, marked(CASES["nothing of it"][0]))
    assert len(got) == 1 and "uses nothing of it" in got[0], got


def test_a_mark_given_twice_is_flagged(tmp_path):
    got = crafted(tmp_path, marked(marked(CASES["a docker command on its container"][0])))
    assert len(got) == 1 and "2 times" in got[0], got


def test_a_mark_for_the_whole_module_counts(tmp_path):
    source = 'pytestmark = upstream_images.needs("autoheal")\n' + textwrap.dedent(CASES["a docker command on its container"][0])
    assert crafted(tmp_path, source) == []


def test_what_names_the_part_is_read_from_the_checkout():
    """Its tag and images (lab/upstream_images.py), the role's container, directory and images (defaults and the
    lab's inventories), its compose project and its alerts: a name the role or the lab changes is followed."""
    names = NEEDLES.parts["autoheal"]
    for image in upstream_images.NEEDED_BY["autoheal"]:
        assert upstream_images.image(image) in names
    assert "/srv/autoheal" in names and "homelab-edge-autoheal" in names and "TraefikRestarted" in names
    assert all(not NEEDLES.match(s) for s in ("traefik-a", "https://127.0.0.1:443", "import socket", "nas-lab"))


# ---------------------------------------------------------------- the plain path's skip decisions (tests/run.sh plain)

PLAIN = '''
    import os
    import sys

    import pytest

    sys.path.insert(0, %r)
    import upstream_images


    @upstream_images.needs("autoheal")
    def test_marked():
        os.system("docker pause autoheal")


    @pytest.mark.parametrize("n", [1, 2])
    def test_plain(n):
        pass
    ''' % os.path.join(ROOT, "lab")


def plain_checkout(tmp_path, extra=""):
    path = tmp_path / "molecule" / "crafted" / "tests" / "test_crafted.py"
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(PLAIN) + textwrap.dedent(extra))
    return str(tmp_path)


def test_plain_path_skips_the_marked_test_naming_its_images_and_collects_the_rest(tmp_path):
    lines, bad = image_bound.plain(plain_checkout(tmp_path), NEEDLES)
    assert bad == [], bad
    assert lines[-1].startswith("2 tests: 1 skipped for a hidden image, each reason naming it; 1 collected"), lines


def test_plain_path_fails_a_skip_for_an_image_that_is_not_the_mark(tmp_path):
    """Skipped for an image by something else than the mark (the analysis would not know it is image-bound), and
    a marked test whose reason does not name the image (another skip taking the mark's place)."""
    extra = '''

    @pytest.mark.skipif(True, reason="no image: the healer")
    def test_skipped_by_hand():
        pass


    @upstream_images.needs("autoheal")
    @pytest.mark.skipif(True, reason="not today")
    def test_marked_but_another_reason():
        os.system("docker stop autoheal")
    '''
    lines, bad = image_bound.plain(plain_checkout(tmp_path, extra), NEEDLES)
    assert len(bad) == 2, bad
    assert "test_skipped_by_hand: not marked, yet skipped for an upstream image: Skipped: no image: the healer" in bad[1], bad
    assert "test_marked_but_another_reason: skipped, but its reason does not name homelab-edge/autoheal:lab" in bad[0], bad


def record(tmp_path, rows):
    path = tmp_path / "verify.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


HIDDEN = "no image: homelab-edge/autoheal:lab hidden / homelab-edge/socket-proxy:lab hidden"


def test_the_plain_scenarios_verifier_is_judged_test_by_test(tmp_path):
    """step plain's Molecule part (image_bound.scenario_plain): each chosen marked test skipped naming the images,
    each adapting one passed, nothing else run; anything else is a problem, named."""
    choice = {"test_nas.py::test_healed": "marked", "test_nas.py::test_table": "adapts"}
    good = [["tests/test_nas.py::test_healed[a]", "setup", "skipped", HIDDEN],
            ["tests/test_nas.py::test_healed[b]", "setup", "skipped", HIDDEN],
            ["tests/test_nas.py::test_table", "setup", "passed", None],
            ["tests/test_nas.py::test_table", "call", "passed", None],
            ["tests/test_nas.py::test_table", "teardown", "passed", None]]
    assert image_bound.verified(record(tmp_path, good), choice) == []
    bad = [["tests/test_nas.py::test_healed[a]", "setup", "passed", None],
           ["tests/test_nas.py::test_healed[b]", "setup", "skipped", "no image: homelab-edge/autoheal:lab"],
           ["tests/test_nas.py::test_table", "setup", "passed", None],
           ["tests/test_nas.py::test_table", "call", "failed", None],
           ["tests/test_nas.py::test_other", "setup", "passed", None]]
    got = image_bound.verified(record(tmp_path, bad), choice)
    assert [p.split(": ", 1)[1].split(" (")[0].split(":")[0] for p in got] == [
        "marked, but not skipped with the images hidden", "skipped, but its reason does not name the images",
        "adapts to the lab, but its call failed without the images", "ran, but was not chosen"], got
    assert image_bound.verified(record(tmp_path, []), choice) == [
        "test_nas.py::test_healed (marked): did not run", "test_nas.py::test_table (adapts): did not run"]
