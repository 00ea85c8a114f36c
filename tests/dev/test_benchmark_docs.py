"""docs/benchmarks.md quotes the committed results whole: every table a
result file saved as it printed (TABLES) appears in the page line for
line, in one block, and every result file the page names is committed."""
import glob
import json
import os
import re

from .conftest import ROOT

DOC = os.path.join(ROOT, "docs", "benchmarks.md")
TABLES = ("dns_tables", "ladder_table", "slow_table", "lowrate_table", "wedge_table", "quota_table", "quota_report_table",
          "separation_table", "cost_table", "cpu_table", "cpu_profile_table")  # what the benchmarks save as they print it


def blocks(text):
    return re.findall(r"```\n(.*?)```", text, re.S)


def test_every_printed_table_of_a_committed_result_is_quoted_whole():
    with open(DOC) as f:
        page = blocks(f.read())
    quoted = 0
    for path in glob.glob(os.path.join(ROOT, "benchmarks", "results", "*.json")):
        with open(path) as f:
            saved = json.load(f)
        for key in TABLES:
            if saved.get(key):
                assert "\n".join(saved[key]) + "\n" in page, "%s: its %s is not quoted whole" % (
                    os.path.basename(path), key)
                quoted += 1
    assert quoted >= 1


def test_every_result_file_the_page_names_is_committed():
    with open(DOC) as f:
        named = set(re.findall(r"benchmarks/results/([\w.-]+\.(?:json|png|svg|folded))", f.read()))
    assert named
    missing = [n for n in sorted(named) if not os.path.exists(os.path.join(ROOT, "benchmarks", "results", n))]
    assert missing == []
