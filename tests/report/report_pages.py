"""Report pages in real headless Chromium: the DOM it renders, and where each plot's text lands.

:func:`with_layout_probe` writes a copy of a report with a script that, once plotly has drawn,
records for every plot its title, each axis's type, title, whether it shows tick labels (a
shared axis does not) and those it rendered, and the boxes of all its text, as JSON in ``<pre id="layout-probe">``; :func:`probed_layout` reads it
back from a DOM dump and :func:`unreadable` lists what a reader could not read.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from string import Template

import pytest

PROBE_ID = "layout-probe"
_PROBE = Template("""
<pre id="$probe" style="display: none"></pre>
<script>
window.addEventListener('load', function () { setTimeout(function () {
  function box(el) {
    var r = el.getBoundingClientRect();
    return {text: el.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  }
  var plots = {};
  document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
    var axes = {};
    Object.keys(gd._fullLayout).filter(function (k) { return /^[xy]axis\\d*$$/.test(k); })
      .forEach(function (k) {
        var ax = gd._fullLayout[k];
        var ticks = Array.from(gd.querySelectorAll('g.' + ax._id + 'tick text'));
        axes[ax._id] = {type: ax.type, title: (ax.title && ax.title.text) || '',
                        labelled: ax.visible !== false && ax.showticklabels !== false,
                        ticks: ticks.map(function (t) { return t.textContent; })};
      });
    var texts = Array.from(gd.querySelectorAll('.main-svg text'))
      .filter(function (t) { return t.textContent && !t.closest('.legend, .hoverlayer'); });
    var title = gd.querySelector('.gtitle');
    plots[gd.id] = {title: title ? title.textContent : '', axes: axes, boxes: texts.map(box)};
  });
  document.getElementById('$probe').textContent = JSON.stringify(plots);
}, 200); });
</script>
""").substitute(probe=PROBE_ID)


def chromium(profile: Path, *args: str) -> str:
    """Run headless Chromium, offline, on ``args``; its stdout."""
    binary = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(binary).exists():
        pytest.fail("Chromium is missing: run .ci/chromium.sh")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--virtual-time-budget=5000",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing may be fetched
        f"--user-data-dir={profile}",
    ]
    result = subprocess.run(
        [binary, *flags, *args], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout


def with_layout_probe(report: Path) -> Path:
    """A copy of ``report``, beside it, with the layout probe added after its plots."""
    probed = report.with_name(f"{report.stem}-probed.html")
    page = report.read_text(encoding="utf-8")
    probed.write_text(page.replace("</body>", f"{_PROBE}</body>"), encoding="utf-8")
    return probed


def probed_layout(dom: str) -> dict:
    """The probe's record of each plot, by its div's id."""
    match = re.search(rf'<pre id="{PROBE_ID}"[^>]*>(.*?)</pre>', dom, re.S)
    assert match and match[1], "the layout probe did not run"
    return json.loads(match[1])


def unreadable(plot: dict) -> list[str]:
    """What a reader could not read in a probed plot: a numeric axis with fewer than two tick
    labels (no scale), a label in exponent or SI form (1e+6, 2e-05, 100µ), or two texts that
    overlap."""
    problems = []
    for name, axis in plot["axes"].items():
        numeric = axis["type"] in ("linear", "log") and axis["labelled"]  # not a shared axis
        if numeric and len(axis["ticks"]) < 2:
            problems.append(f"axis {name} ({axis['title']}) has tick labels {axis['ticks']}")
        odd = [t for t in axis["ticks"] if re.search(r"\de[+-−]|\d[µmkMG]$", t)]
        if odd:
            problems.append(f"axis {name} ({axis['title']}) has tick labels {odd}")
    boxes = [b for b in plot["boxes"] if b["right"] > b["left"]]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if _overlap(a, b) > 1:
                problems.append(f"{a['text']!r} overlaps {b['text']!r}")
    return problems


def _overlap(a: dict, b: dict) -> float:
    """The smaller of the two overlaps of boxes ``a`` and ``b``, in pixels (≤ 0: apart)."""
    across = min(a["right"], b["right"]) - max(a["left"], b["left"])
    down = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
    return min(across, down)
