"""The picture drawer of the lab's Prometheus data: well-formed SVG, alert intervals from ALERTS samples."""
import os
import sys
import xml.etree.ElementTree as ET

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import svgplot  # noqa: E402


def test_firing_samples_become_intervals_and_a_gap_splits_them():
    pts = [(0, 1), (2, 1), (4, 1), (10, 1), (12, 1)]
    assert svgplot.intervals(pts, 2) == [(0, 6), (10, 14)]
    assert svgplot.intervals([(0, 0), (2, 0)], 2) == []


def test_the_picture_is_well_formed_and_names_each_line_and_alert():
    panels = [{"title": "a <fault> & more", "lines": [("probe answered", [(0, 1), (10, 0), (20, 1)]),
                                                     ("empty", [])],
               "shaded": [("SomeAlert", [(8, 14)])]}]
    text = svgplot.svg("title", panels, 0, 20, note="drawn from data")
    root = ET.fromstring(text)
    words = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "a <fault> & more" in words and "probe answered" in words and "SomeAlert firing" in words
    assert len(list(root.iter("{http://www.w3.org/2000/svg}path"))) == 1
