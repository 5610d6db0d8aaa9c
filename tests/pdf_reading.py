"""Reading rendered PDFs back as people see them: their text, their pages as images, and
whether a Chinese document slipped into English (pypdfium2: PDFium, the engine of Chrome's viewer)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pypdfium2 as pdfium

# Words a zh-CN document may write in Latin letters: units, the currency code and what names hardware.
ALWAYS_ALLOWED = frozenset({"kWh", "PUE", "CNY", "GPU"})
_WORD = re.compile(r"[A-Za-z][A-Za-z]+")


def pdf_text(data: bytes) -> str:
    """The text of every page, as PDFium extracts it (what a reader copies or a screen reader says)."""
    document = pdfium.PdfDocument(data)
    try:
        return "\n".join(document[i].get_textpage().get_text_range() for i in range(len(document)))
    finally:
        document.close()


def save_pages(data: bytes, stem: Path, scale: float = 1.6) -> list[Path]:
    """Each page as a PNG next to `stem` (stem-1.png, …): for people to look at."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    document = pdfium.PdfDocument(data)
    paths = []
    try:
        for i in range(len(document)):
            path = stem.with_name(f"{stem.name}-{i + 1}.png")
            document[i].render(scale=scale).to_pil().save(path)
            paths.append(path)
    finally:
        document.close()
    return paths


def english_words(text: str, outside: Iterable[str]) -> set[str]:
    """Latin words of `text` that are neither ALWAYS_ALLOWED nor part of a text from outside the
    labels (ids, names, e-mail addresses, model names) — on a zh-CN document, words left in English."""
    allowed = set(ALWAYS_ALLOWED)
    for value in outside:
        allowed.update(_WORD.findall(str(value)))
    return {word for word in _WORD.findall(text) if word not in allowed}
