"""The code blocks of the README and of ``docs/``, run as a reader runs them: in order, one
empty folder per page.

The rules their fenced blocks follow:

- A ``bash`` or ``python`` block runs here, in order, in one empty folder per page, with
  ``automl`` on the PATH and no ``AUTOML_*`` variables set, as for a reader following the page.
  It must exit 0. Its ``automl`` commands and a ``python`` block run in processes forked from the
  test worker's zygote (tests/zygote.py), each still a process of its own.
- A ``text`` block right after a block that runs is what that block prints: each of its lines must
  be in the block's output (stdout and stderr), any number matching any number. Lines drawn with
  box characters (tables, progress bars) and ``…`` (output left out) are not compared.
- A ``yaml`` block is a study spec, or a search space (it has ``params``), and must load.
- A block right after ``<!-- check: tests/a.py::test_x tests/b.py::test_y -->`` does not run here:
  it takes long or needs a server, PostgreSQL or a GPU. The tests it names run those commands,
  and must exist.
- A block right after ``<!-- shown: why -->`` is shown, not run: a diagram, or a file for another
  program (a unit file, a manifest), or commands whose output is their purpose (benchmarks).
  Blocks in other languages must be shown.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from automl.search.space import SearchSpace
from automl.search.spec import load_spec, parse_spec

if TYPE_CHECKING:
    from zygote import Zygote

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- check: (?P<tests>[^>]+?) -->$")
SHOWN = re.compile(r"^<!-- shown: [^>]+ -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
BOX_DRAWING = re.compile("[\u2500-\u259f]")
RUN = ("bash", "python")
LANGUAGES = (*RUN, "text", "yaml")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    lang: str
    code: str
    line: int  # of its opening fence, counted from 1
    covered_by: tuple[str, ...]  # the tests its marker names; empty when it runs here
    page: str = "README.md"
    shown: bool = False  # shown, not run or compared

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang})"

    @property
    def runs_here(self) -> bool:
        return self.lang in RUN and not self.covered_by and not self.shown


def read_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text``, each with the marker on the line before it, if any."""
    blocks, lines = [], text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = lines.index("```", index + 1)
        before = lines[index - 1] if index else ""
        marker = MARKER.match(before)
        covered_by = tuple(marker["tests"].split()) if marker else ()
        code = "\n".join(lines[index + 1 : end]) + "\n"
        shown = bool(SHOWN.match(before))
        blocks.append(Block(opening["lang"], code, index + 1, covered_by, page, shown))
        index = end + 1
    return blocks


PAGE_BLOCKS = {
    page.relative_to(ROOT).as_posix(): read_blocks(
        page.read_text(), page.relative_to(ROOT).as_posix()
    )
    for page in PAGES
}
BLOCKS = [block for blocks in PAGE_BLOCKS.values() for block in blocks]


def output_pattern(line: str) -> re.Pattern[str]:
    """A regex for ``line`` in which any number matches any number and spaces any spaces."""
    words = NUMBER.split(line.strip())
    return re.compile(NUMBER.pattern.join(_loose(text) for text in words))


def _loose(text: str) -> str:
    return r"\s+".join(re.escape(word) for word in re.split(r"\s+", text))


def missing_lines(expected: str, printed: str) -> list[str]:
    """The lines of ``expected`` that ``printed`` lacks (see the module's rules)."""
    compared = [
        line
        for line in expected.splitlines()
        if line.strip() and line.strip() != "…" and not BOX_DRAWING.search(line)
    ]
    return [line for line in compared if not output_pattern(line).search(printed)]


def reader_env(zygote: Zygote) -> dict[str, str]:
    """A reader's shell: ``automl`` first on the PATH (tests/bin's, forked from ``zygote``,
    then the venv's), no automl settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOML_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return zygote.client_env(env)


def run_block(block: Block, folder: Path, zygote: Zygote) -> subprocess.CompletedProcess:
    env = reader_env(zygote)
    if block.lang == "python":
        return zygote.python(["-c", block.code], cwd=folder, env=env, timeout=600)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code], cwd=folder, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def test_the_readme_has_blocks_of_every_kind() -> None:
    kinds = {block.lang for block in PAGE_BLOCKS["README.md"]}
    assert set(LANGUAGES) - {"yaml"} <= kinds, kinds
    unknown = [str(b) for b in BLOCKS if b.lang not in LANGUAGES and not b.shown]
    assert not unknown, f"blocks in a language the check does not know, not marked shown: {unknown}"


def test_every_page_of_docs_is_read() -> None:
    assert {"README.md", "docs/gpu.md", "docs/models.md", "docs/cli.md"} <= set(PAGE_BLOCKS)
    assert any(b.lang == "yaml" and not b.shown for b in BLOCKS)


def test_every_marked_block_names_tests_that_exist() -> None:
    for block in BLOCKS:
        for test in block.covered_by:
            path, _, name = test.partition("::")
            source = ROOT / path
            assert source.is_file(), f"{block}: {path} does not exist"
            assert re.search(rf"^def {re.escape(name)}\(", source.read_text(), re.M), (
                f"{block}: {path} has no test {name!r}"
            )
        if block.covered_by:
            assert block.lang in RUN, f"{block}: a marker on a block that is not a command"


def test_outputs_follow_a_block_that_runs() -> None:
    pairs = [pair for blocks in PAGE_BLOCKS.values() for pair in itertools.pairwise(blocks)]
    firsts = [(None, blocks[0]) for blocks in PAGE_BLOCKS.values() if blocks]
    for before, block in [*firsts, *pairs]:
        if block.lang == "text" and not block.shown:
            assert before is not None and before.runs_here, (
                f"{block}: an output block must follow a block that runs here"
            )


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "yaml" and not b.shown], ids=str)
def test_spec_blocks_load(block: Block) -> None:
    import yaml

    data = yaml.safe_load(block.code)
    if "params" in data:  # a search space
        assert SearchSpace.model_validate(data).name == data["name"]
        return
    spec = parse_spec(data)
    if spec.name == "digits-cpu":  # the README shows it as the default spec, and the defaults
        assert spec == load_spec(ROOT / "studies" / "digits.yaml")
        defaults = parse_spec({}).model_dump(exclude={"name"})
        assert spec.model_dump(exclude={"name"}) == defaults


RUN_PAGES = [page for page, blocks in PAGE_BLOCKS.items() if any(b.runs_here for b in blocks)]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES)
def test_every_block_runs_as_written_and_prints_what_it_shows(
    tmp_path: Path, page: str, zygote: Zygote
) -> None:
    problems, printed = [], None
    for block in PAGE_BLOCKS[page]:
        if block.runs_here:
            done = run_block(block, tmp_path, zygote)
            printed = done.stdout + done.stderr
            if done.returncode != 0:
                problems.append(f"{block} exited {done.returncode}:\n{printed[-3000:]}")
        elif block.lang == "text" and not block.shown and printed is not None:
            if missing := missing_lines(block.code, printed):
                problems.append(f"{block} shows lines it did not print: {missing}\n{printed}")
            printed = None
    assert not problems, "\n\n".join(problems)


@pytest.mark.slow
def test_make_study_runs_the_default_spec(tmp_path: Path, zygote: Zygote) -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(
        r"^study: .*\n\t\$\(BIN\)/automl study start studies/digits\.yaml$", makefile, re.M
    )
    assert re.search(r"^test: .*\n(\t.*\n)*\t\$\(BIN\)/pytest", makefile, re.M)  # CI runs it
    spec = ROOT / "studies" / "digits.yaml"
    start = ["automl", "study", "start", str(spec), "--n-trials", "1", "--no-remeasure-front"]
    done = subprocess.run(
        start, cwd=tmp_path, env=reader_env(zygote), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Study digits-cpu ended: done." in done.stdout
    assert (tmp_path / "studies" / "automl.db").is_file()  # the default storage, as the README says


def test_output_lines_match_with_other_numbers_only() -> None:
    expected = "picked trial 1 (accuracy 0.9722): p99 0.1413 ms [0.1349, 0.7755], wholly <= 10\n…\n"
    assert not missing_lines(
        expected, "picked trial 12 (accuracy 0.95): p99 3 ms [1.5, 2,000.25], wholly <= 10"
    )
    assert missing_lines(expected, "picked trial 12 (accuracy 0.95): p99 3 ms [1.5, 2.0], exceeds")
    table = "┃ trial ┃ candidate ┃\n"
    assert not missing_lines(table, "")


LINK = re.compile(r"\]\((?P<target>[^)#\s:]+)(?:#[^)]*)?\)")


def test_every_relative_link_of_the_pages_resolves() -> None:
    broken = [
        f"{page.relative_to(ROOT)} links {m['target']}"
        for page in PAGES
        for m in LINK.finditer(page.read_text())
        if not (page.parent / m["target"]).exists()
    ]
    assert not broken, broken


def test_the_readme_stays_short_enough_to_read() -> None:
    assert len(README.read_text().splitlines()) <= 300  # the rest belongs in docs/
