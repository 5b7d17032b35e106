"""The pages of docs/ as a user copies from them."""

from __future__ import annotations

from support.paths import ROOT


def code_blocks(page: str, section: str, lang: str) -> list[str]:
    """The ```lang code blocks of ``section`` (a ``## `` heading) of ``docs/<page>``."""
    text = (ROOT / "docs" / page).read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [b.split("\n```", 1)[0] for b in body.split(f"```{lang}\n")[1:]]
