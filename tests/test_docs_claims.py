"""The numbers the front page and the stage pages quote are the numbers docs/benchmarks.md measured.

A claim is a README "What is measured" row (its result cell, checked against the benchmarks section its link
points to) or a stage-page line quoting a demo's "start → end" next to a link into docs/benchmarks.md. Every
number in the claim must appear in that section, so a number edited on one side only fails here.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
BENCH_LINK = re.compile(r"benchmarks\.md#([\w-]+)")


def slug(heading: str) -> str:
    """mkdocs' (python-markdown toc) anchor of a heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text).strip("-")


def sections(markdown: str) -> dict:
    """Anchor -> text of every ## / ### section (up to the next heading of the same or a higher level)."""
    out, lines = {}, markdown.splitlines()
    heads = [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(lines)
             if (m := re.match(r"^(#{2,3}) (.+)$", line))]
    for n, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[n + 1:] if lv <= level), len(lines))
        out[slug(title)] = "\n".join(lines[i + 1:end])
    return out


def numbers(text: str) -> list:
    # "0.88-1.03" and "0.022–0.233" are two numbers; a range's dash is not a minus sign.
    return [n.lstrip("-") for n in NUMBER.findall(text.replace("–", " ").replace("-", " - "))]


def readme_claims(readme: str) -> list:
    """(label, result cell, anchor) for each row of the README's "What is measured" table."""
    block = readme.split("## What is measured", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("|") and "benchmarks.md#" in line]
    out = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        out.append((cells[0], cells[1], BENCH_LINK.search(cells[2]).group(1)))
    return out


def stage_claims(page: str) -> list:
    """(label, quoted start → end, anchor) for each paragraph of a stage page that quotes a demo's start → end
    and links into docs/benchmarks.md."""
    out = []
    for para in re.split(r"\n\s*\n", page):
        link = BENCH_LINK.search(para)
        if not link:
            continue
        for m in re.finditer(r"\d+(?:\.\d+)? → \d+(?:\.\d+)?(?: \(\d+(?:\.\d+)?[–-]\d+(?:\.\d+)?\))?", para):
            out.append((para.splitlines()[0][:60], m.group(0), link.group(1)))
    return out


def unmatched(claim: str, section: str) -> list:
    """The claim's numbers that the section does not contain (as whole numbers, not as digits of another)."""
    present = set(numbers(section))
    return [n for n in numbers(claim) if n not in present]


def claims():
    bench = sections((ROOT / "docs/benchmarks.md").read_text())
    found = [("README.md", *c) for c in readme_claims((ROOT / "README.md").read_text())]
    for page in sorted((ROOT / "docs/stages").glob("*.md")):
        found += [(f"docs/stages/{page.name}", *c) for c in stage_claims(page.read_text())]
    return bench, found


def test_readme_table_has_every_row_linked():
    rows = readme_claims((ROOT / "README.md").read_text())
    assert len(rows) >= 7, rows


def test_stage_pages_quote_their_demo_numbers():
    _, found = claims()
    pages = {f for f, *_ in found if f.startswith("docs/stages/")}
    assert len(pages) >= 4, pages


@pytest.mark.parametrize("where,label,claim,anchor", claims()[1])
def test_claim_matches_the_benchmark_section(where, label, claim, anchor):
    bench = claims()[0]
    assert anchor in bench, f"{where}: '{label}' links to #{anchor}, no such section in docs/benchmarks.md"
    missing = unmatched(claim, bench[anchor])
    assert not missing, (f"{where}: '{label}' says {claim!r}; {missing} not in docs/benchmarks.md#{anchor}")


def test_a_planted_difference_fails():
    bench, found = claims()
    where, label, claim, anchor = found[0]
    planted = claim.replace(numbers(claim)[0], "0.4321", 1)
    assert unmatched(planted, bench[anchor]) == ["0.4321"]
