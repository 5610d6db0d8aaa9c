"""The CJK font of the PDFs: found once, parsed once per process, attached to each document.

    CJK_FONTS                    where the font is looked for (Debian paths, first found wins)
    cjk_font() -> CjkFont        the one found; FontMissing (naming the packages) when none is
    attach_cjk(pdf, texts)       register it in one FPDF document (ReportPDF does, when needed)
    warm_up() -> str             for long-lived processes: make the "common" face, check thoroughly
    self_check() -> str          the adapter's check (a log line says how it went)

Why an adapter: fpdf2's ``add_font`` parses the whole font with fontTools on every call
(the cmap and widths of ~30,000-65,000 glyphs: 0.2-0.3 s per document here), and on
writing the PDF it subsets that font in place, which walks the whole font again (another
0.05-0.5 s). A download must stay well under a second at 50 clients, so:

1. the parsed state of each *face* (cmap, widths, glyph ids, descriptor: read-only once
   parsed) is made once per process, and each document gets a copy of fpdf2's ``TTFFont``
   sharing it, with its own per-document parts: index, subset map, missing-glyph list and a
   freshly opened, lazy fontTools object (fpdf2 subsets that object in place);
2. `warm_up` also makes a "common" face: the font cut down once (seconds) to printable
   Latin, punctuation, CJK symbols, full-width forms and the 6,763 hanzi of GB 2312, which
   holds every label and nearly every Chinese name. A document whose every character it
   holds embeds from it; subsetting a font of ~7,000 glyphs instead of ~30,000-65,000 is
   what makes the per-document cost small. Other documents (a rare character) embed from
   the full font: slower, same look. Without `warm_up` (a one-off command) documents use
   the full face, which is cheaper than making the common one for a single PDF.
3. either face gives a document the same bytes (issue 37: a PDF is a function of its document,
   whichever process renders it, warmed up or not): the common face keeps, for each glyph it
   holds, every code point the full font maps to it (a CJK compatibility ideograph beside its
   unified one, U+0000 that fpdf2 reserves), the full font's bounding box and its subroutines,
   so that fpdf2's subset of it is the subset of the full font. `warm_up` checks that on a
   sample and, should it not hold, makes no common face (ERROR in the log; slower, same bytes).

That relies on fpdf2's internals (``TTFFont.__slots__``, ``SubsetMap``), so the first
document runs a quick :func:`self_check` (a copied face maps a sample to glyphs), and
`warm_up` a thorough one (for every face, the copy writes the same bytes as a fresh parse,
with an embedded font file and a ToUnicode map). Should it not fit (an fpdf2 upgrade),
every document parses the font itself (same bytes, slower), the reason is logged at ERROR
and ``FAST_PATH`` is False; ``tests/unit/test_render_cjk.py`` fails on such an upgrade.

Which font, measured here (2 cores; median of 5 after one warm-up render; the commands are
in tests/unit/test_render_cjk.py's docstring). One invoice PDF in Chinese:

    WenQuanYi Micro Hei (fonts-wqy-microhei, TrueType), common face   0.12 s   warm_up 4-7 s
    Noto Sans CJK SC (fonts-noto-cjk, CFF), common face               0.17 s   warm_up 11-26 s
    WenQuanYi, full face (no warm_up)                                 0.35 s
    the font parsed per document (fpdf2's add_font): WenQuanYi 0.38 s, Noto 0.55 s
    for scale: the English invoice (core font) 0.016 s

so WenQuanYi comes first (fontTools subsets TrueType outlines faster than CFF charstrings,
whose bounds it recomputes), then Noto; ``scripts/bootstrap`` installs both.
``GPUBILL_CJK_FONT=/path/font.ttc[#index]`` chooses another font.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.errors import ReportsError

__all__ = ["CJK_FONTS", "CjkFont", "FontMissing", "attach_cjk", "cjk_font", "face_for", "self_check", "warm_up"]

log = logging.getLogger("gpubill.render")
# fontTools logs every subsetting step at INFO: one line per table per PDF drowns the service's log;
# and at WARNING "FFTM NOT subset; don't know how to subset; dropped" for every font that has
# FontForge's timestamp table (WenQuanYi has): dropping it is right (PDFs never read it), so its
# warnings are noise too. Errors still show.
logging.getLogger("fontTools.subset").setLevel(logging.ERROR)


class FontMissing(ReportsError):
    """A document needs Chinese (or other CJK) text and no CJK font is installed."""


@dataclass(frozen=True)
class CjkFont:
    path: str
    number: int  # the font's index in a .ttc collection
    package: str  # the Debian package that installs it


CJK_FONTS = (
    CjkFont("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0, "fonts-wqy-microhei"),
    CjkFont("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2, "fonts-noto-cjk"),  # 2: Simplified Chinese
    CjkFont("/usr/share/fonts/opentype/noto/NotoSansCJKsc-Regular.otf", 0, "fonts-noto-cjk"),
)

_lock = threading.Lock()
_faces: dict[str, Any] = {}  # "full" / "common": the parsed fpdf2 TTFFont every document copies
_common_bytes: bytes = b""  # the "common" face's font file (a subset of the full one, made at load)
_chosen: CjkFont | None = None
_warmed: str | None = None  # warm_up's self-check line, once it passed: fpdf2 does not change under a process
FAST_PATH: bool | None = None  # None until the self-check ran; False: every document parses the font


def cjk_font() -> CjkFont:
    """The CJK font to embed: ``$GPUBILL_CJK_FONT`` or the first of CJK_FONTS installed."""
    chosen = os.environ.get("GPUBILL_CJK_FONT", "")
    if chosen:
        path, _, number = chosen.partition("#")
        if not Path(path).is_file() or not (number or "0").isdigit():
            raise FontMissing(f"GPUBILL_CJK_FONT={chosen!r}: give a font file, with #N for the Nth font of a .ttc")
        return CjkFont(path, int(number or 0), "(GPUBILL_CJK_FONT)")
    for font in CJK_FONTS:
        if Path(font.path).is_file():
            return font
    raise FontMissing(
        "this PDF has Chinese text and no CJK font is installed: install fonts-noto-cjk or fonts-wqy-microhei "
        "(apt-get install fonts-noto-cjk fonts-wqy-microhei; scripts/bootstrap does), "
        f"looked for {', '.join(f.path for f in CJK_FONTS)}"
    )


def common_chars() -> set[int]:
    """What the "common" face holds: printable ASCII and Latin-1, general punctuation, CJK
    symbols, full-width forms, and the 6,763 hanzi of GB 2312 (every label is among them)."""
    chars = set(range(0x20, 0x7F)) | set(range(0xA0, 0x100))
    for lo, hi in ((0x2000, 0x2070), (0x2100, 0x2200), (0x3000, 0x3040), (0xFF00, 0xFFF0)):
        chars |= set(range(lo, hi))
    for row in range(0xB0, 0xF8):
        for cell in range(0xA1, 0xFF):
            try:
                chars.add(ord(bytes((row, cell)).decode("gb2312")))
            except UnicodeDecodeError:
                pass  # the five unassigned cells at the end of row 0xD7
    return chars


def _new_face(source: Any, number: int) -> Any:
    """fpdf2's parse of a font file (what ``add_font`` does), not yet bound to a document."""
    from fpdf import FPDF
    from fpdf.fonts import TTFFont

    return TTFFont(FPDF(), source, "cjk", "", collection_font_number=number)


def _make_common(font: CjkFont) -> bytes:
    """The "common" face's font file: the full font cut down to the glyphs of `common_chars`, such
    that fpdf2's subset of it for a document is byte for byte its subset of the full font."""
    from fontTools import subset as ftsubset
    from fontTools import ttLib

    # the head's bounding box is the full font's (fpdf2 writes it as the descriptor's /FontBBox)
    full = ttLib.TTFont(font.path, fontNumber=font.number, recalcTimestamp=False, recalcBBoxes=False)
    # subroutines kept: fpdf2 keeps them, and a desubroutinized face would embed other CFF bytes
    options = ftsubset.Options(notdef_outline=True, recommended_glyphs=True, layout_features=[], name_IDs=["*"],
                               name_languages=["*"], glyph_names=True)
    subsetter = ftsubset.Subsetter(options)
    # by glyph, not by code point: the cmap then keeps every code point of a kept glyph, as fpdf2's
    # subset of the full font does (its glyph names and OS/2 ranges follow the cmap); U+0000 is
    # one of the two code points fpdf2's SubsetMap reserves (U+0020 is in common_chars)
    cmap = full.getBestCmap()
    subsetter.populate(glyphs={cmap[c] for c in common_chars() | {0x00} if c in cmap})
    subsetter.subset(full)
    out = io.BytesIO()
    full.save(out)
    return out.getvalue()


def _load() -> None:
    """Parse the full face once per process (what one ``add_font`` costs)."""
    global _chosen
    if _faces:
        return
    with _lock:
        if not _faces:
            chosen = cjk_font()
            _faces["full"] = _new_face(chosen.path, chosen.number)
            _chosen = chosen


def warm_up() -> str:
    """Make the "common" face too (seconds, once per process) and check the adapter; for a
    long-lived process (the download service at start-up, an invoice run writing many PDFs).
    Safe to call more than once, from any thread; returns the self-check's line (the thorough
    check runs once per process: every API app a process creates warms up at its start)."""
    global _common_bytes, _warmed
    if _warmed is not None:
        return _warmed
    _load()
    assert _chosen is not None
    with _lock:
        if "common" not in _faces:
            try:
                common_bytes = _make_common(_chosen)
                face = _new_face(io.BytesIO(common_bytes), 0)
                _common_bytes = common_bytes  # before the face is visible: documents open these bytes
                if _sample("common", fast=False) != _sample("full", fast=False):
                    _common_bytes = b""
                    raise AssertionError("a document embeds other bytes from it than from the full font")
                _faces["common"] = face
            except Exception as exc:  # noqa: BLE001 - without it every CJK document embeds from the full face
                log.error("could not make the common subset of %s (%r); CJK PDFs embed from the full font",
                          _chosen.path, exc)
    line = self_check()
    if FAST_PATH:
        _warmed = line
    return line


def face_for(texts: Iterable[str]) -> str:
    """The face for `texts`: "common" when it is made (`warm_up`) and draws all their characters, else "full"."""
    _load()
    common = _faces.get("common")
    if common is None:
        return "full"
    cmap = common.cmap
    for text in texts:
        for char in text:
            if ord(char) not in cmap and char not in "\n\r\t":
                return "full"
    return "common"


def _open(face: str) -> Any:
    from fontTools import ttLib

    if face == "common":
        return ttLib.TTFont(io.BytesIO(_common_bytes), recalcTimestamp=False, lazy=True)
    assert _chosen is not None
    return ttLib.TTFont(_chosen.path, recalcTimestamp=False, fontNumber=_chosen.number, lazy=True)


_PER_DOCUMENT = ("i", "fontkey", "ttfont", "subset", "missing_glyphs", "biggest_size_pt", "_hbfont", "color_font")


def _copy_for(pdf: Any, family: str, face: str) -> Any:
    """A TTFFont for `pdf` sharing the face's parsed tables, with its own per-document state."""
    from fpdf.fonts import SubsetMap, TTFFont

    template = _faces[face]
    font = object.__new__(TTFFont)
    for slot in TTFFont.__slots__:
        if slot not in _PER_DOCUMENT and hasattr(template, slot):  # fpdf2 leaves some slots unset
            setattr(font, slot, getattr(template, slot))
    font.i = len(pdf.fonts) + 1
    font.fontkey = family
    font.ttfont = _open(face)  # fresh: fpdf2 subsets it in place when it writes the PDF
    font.missing_glyphs = []
    font.biggest_size_pt = 0
    font._hbfont = None
    font.color_font = None
    font.subset = SubsetMap(font)
    return font


def _parsed_for(pdf: Any, family: str, face: str) -> Any:
    """The slow path: what ``add_font`` does, a full parse for this one document."""
    from fpdf.fonts import TTFFont

    assert _chosen is not None
    source = io.BytesIO(_common_bytes) if face == "common" else _chosen.path
    return TTFFont(pdf, source, family, "", collection_font_number=0 if face == "common" else _chosen.number)


def attach_cjk(pdf: Any, texts: Iterable[str] = (), family: str = "cjk") -> str:
    """Register the CJK font in `pdf` as `family` (regular style only), from the smallest face
    that draws every character of `texts` (all the text the document will hold); returns the
    face's name. FontMissing when no CJK font is installed."""
    _load()
    if FAST_PATH is None:
        self_check(thorough=False)
    face = face_for(texts)
    pdf.fonts[family] = _copy_for(pdf, family, face) if FAST_PATH else _parsed_for(pdf, family, face)
    return face


_CHECK_TEXT = "用量 GPU ¥1,234.56"


def self_check(*, thorough: bool = True) -> str:
    """Check that the adapter still fits fpdf2: a copied face picks glyphs for a sample text
    (cheap: what the first CJK document of a process runs); `thorough` also renders the sample
    with every face, copied and freshly parsed, and requires the same bytes, an embedded font
    file and a ToUnicode map (`warm_up` runs it). Sets FAST_PATH; logs the outcome (INFO when
    it fits, ERROR with the reason when not, and documents then parse the font each)."""
    global FAST_PATH
    _load()
    assert _chosen is not None
    try:
        from fpdf import FPDF

        copy = _copy_for(FPDF(), "cjk", "full")
        if any(copy.subset.pick(ord(c)) is None for c in _CHECK_TEXT) or not copy.subset.get_all_glyph_names():
            raise AssertionError("a copied face does not map the sample text to glyphs")
        for face in list(_faces) if thorough else ():
            fast, slow = _sample(face, fast=True), _sample(face, fast=False)
            if fast != slow:
                raise AssertionError(f"the copied {face} face writes other bytes than a parse of its own")
            if b"/FontFile" not in fast or b"/ToUnicode" not in fast:
                raise AssertionError("no embedded font file or ToUnicode map")
    except Exception as exc:  # noqa: BLE001 - any misfit of fpdf2's internals means: use the slow path
        FAST_PATH = False
        message = f"CJK font adapter does not fit this fpdf2 ({exc!r}); PDFs with Chinese parse the font each (slower)"
        log.error(message)
        return message
    FAST_PATH = True
    message = (f"CJK font {_chosen.path}#{_chosen.number} ({_chosen.package}) parsed once, shared by every PDF "
               f"(faces: {', '.join(_faces)}; {'thorough' if thorough else 'quick'} check)")
    log.info(message)
    return message


def _sample(face: str, *, fast: bool) -> bytes:
    from datetime import datetime, timezone

    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_creation_date(datetime(1970, 1, 1, tzinfo=timezone.utc))
    pdf.fonts["cjk"] = _copy_for(pdf, "cjk", face) if fast else _parsed_for(pdf, "cjk", face)
    pdf.add_page()
    pdf.set_font("cjk", "", 10)
    pdf.cell(0, 10, _CHECK_TEXT)
    return bytes(pdf.output())
