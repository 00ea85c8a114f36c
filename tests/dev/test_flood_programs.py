"""The flood programs the lab's clients run (tests/support/programs) say when they are under way
(FLOOD_STARTED): the tests wait for that, not for a guessed time (issue 67). Run here against 127.0.0.1."""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAMS = os.path.join(ROOT, "tests", "support", "programs")


def run(program, args, marker):
    out = subprocess.run([sys.executable, os.path.join(PROGRAMS, program)] + [str(a) for a in args],
                         env=dict(os.environ, FLOOD_STARTED=str(marker)), capture_output=True, text=True, timeout=60,
                         check=True)
    return json.loads(out.stdout)


def test_tcp_flood_says_when_its_connections_are_made(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        counts = run("tcp_flood.py", ["127.0.0.1", listener.getsockname()[1], 20, 0], tmp_path / "started")
    finally:
        listener.close()
    assert counts["established"] == 20 and (tmp_path / "started").exists()


def test_https_flood_says_when_its_requests_go_out_even_where_none_connects(tmp_path, closed):
    counts = run("https_flood.py", ["127.0.0.1", closed, "/", 5], tmp_path / "started")
    assert counts == {"ConnectionRefusedError": 5} and (tmp_path / "started").exists()


def test_without_the_variable_nothing_is_written(tmp_path, closed):
    out = subprocess.run([sys.executable, os.path.join(PROGRAMS, "https_flood.py"), "127.0.0.1", str(closed), "/", "2"],
                         cwd=str(tmp_path), env=dict((k, v) for k, v in os.environ.items() if k != "FLOOD_STARTED"),
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == {"ConnectionRefusedError": 2} and os.listdir(str(tmp_path)) == []
