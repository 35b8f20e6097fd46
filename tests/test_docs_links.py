"""Every relative link and image in README.md and docs/**/*.md points at a file that exists, and a `#heading` anchor
at a heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens, `-1`, `-2` for
repeats). Links inside code blocks and inline code are not links; `http(s):` and `mailto:` ones are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.paths import REPO

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans removed."""
    out, fenced = [], False
    for lineno, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((lineno, re.sub(r"`[^`]*`", "", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    broken = []
    for lineno, line in _prose_lines(path.read_text()):
        for m in _LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO)}:{lineno}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
                broken.append(f"{where} (no such heading in {dest.name})")
    return broken


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_images_point_at_what_exists(path):
    broken = broken_links(path)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_check_fails_on_a_broken_link(tmp_path, monkeypatch):
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# The `b` file: its heading\n\n```\n# not a heading\n```\n## Twice\n## Twice\n")
    doc.write_text("[ok](b.md#the-b-file-its-heading) [ok](b.md#twice-1) ![gone](img/nothing.png)\n"
                   "[gone](c.md) [bad anchor](b.md#not-a-heading) `[code](nowhere.md)` [web](https://x.org/y)\n"
                   "```\n[in a block](nowhere.md)\n```\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert [b.split(": ", 1)[1] for b in broken_links(doc)] == [
        "img/nothing.png (no such file)", "c.md (no such file)", "b.md#not-a-heading (no such heading in b.md)"]
