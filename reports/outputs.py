"""The files gpubill writes: how they are named, where they may go, and with which mode.

Every output file (invoices, usage reports, cost-share files, the demo's files, a
command's ``--out FILE``) is written by :func:`write_output`, and every name built from
data by :func:`output_name`. What they promise:

- a name never holds a raw id: a tenant (or any other part) that is not in the id syntax
  (``schemas.ids.is_id``: no ``/``, ``..``, NUL, spaces, at most 64 characters) is
  replaced by ``_`` and a hash of it. No id starts with ``_``, so such a name cannot be
  another tenant's; the same tenant always gets the same name;
- :func:`path_inside` refuses a name that would resolve outside its directory (through
  ``..`` or a symbolic link), as a second line of defence;
- a file is written whole or not at all (a temporary file beside it, then renamed over
  it: a symbolic link planted at the path is replaced, not followed), with ``file_mode``
  (default 0640) whatever the umask; directories created for it get :func:`dir_mode`
  (0750 for 0640). Existing directories are left as they are.

A ``file_mode`` must let the owner read and write, may let the group read or write, and
gives others nothing and nobody execution (:func:`check_file_mode`): these files hold
customers' bills.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from schemas.ids import is_id

__all__ = ["DEFAULT_FILE_MODE", "check_file_mode", "dir_mode", "make_dirs", "output_name", "path_inside",
           "write_output"]

DEFAULT_FILE_MODE = 0o640
FORMATS = frozenset({"csv", "json", "parquet", "pdf", "txt"})
_LANGS = ("en", "zh-CN")  # reports.render.i18n.LANGS (not imported: outputs stays below the renderers)


def check_file_mode(mode: int) -> int:
    """`mode` if it is a file mode gpubill may write with; ValueError saying why if not."""
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o777:
        raise ValueError(f"{mode!r} is not a file mode like 0640")
    if mode & 0o600 != 0o600:
        raise ValueError(f"{mode:04o}: the owner must be able to read and write (0600 at least)")
    if mode & 0o007:
        raise ValueError(f"{mode:04o}: other users may not read or write billing files (use 0640 or 0600)")
    if mode & 0o111:
        raise ValueError(f"{mode:04o}: report files are not executable")
    return mode


def dir_mode(file_mode: int) -> int:
    """The mode of a directory created for files of `file_mode`: search where read is allowed."""
    return file_mode | (file_mode & 0o444) >> 2


def _part(value: str) -> str:
    if is_id(value):
        return value
    digest = hashlib.sha256(str(value).encode("utf-8", "surrogatepass")).hexdigest()
    return f"_{digest[:32]}"


def output_name(kind: str | None, tenant: str | None, period: str, fmt: str, *, lang: str = "en") -> str:
    """``KIND_TENANT_PERIOD.FMT`` (parts that are None left out) with every part file-safe; a PDF
    labelled in a language other than English is ``KIND_TENANT_PERIOD.LANG.pdf``
    (``GB-2026-000001_t01_2026-11.zh-CN.pdf``), so that both languages of one document can lie in
    one folder (and `curl -OJ` them). CSV, JSON and Parquet are the same in every language: one name.

    ``kind`` is what the file is (``cost-share``) or an invoice number (``GB-2026-000001``);
    a part not in the id syntax becomes ``_`` and 32 hex digits of its SHA-256.
    ``fmt`` must be one of :data:`FORMATS` and ``lang`` one of reports.render.i18n.LANGS (they are
    ours, not the data's): ValueError if not.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}")
    if lang not in _LANGS:
        raise ValueError(f"unknown language {lang!r}")
    parts = [_part(part) for part in (kind, tenant, period) if part is not None]
    tag = f".{lang}" if fmt == "pdf" and lang != "en" else ""
    return f"{'_'.join(parts)}{tag}.{fmt}"


def path_inside(directory: Path, name: str) -> Path:
    """``directory / name``, refused (ValueError) unless it resolves to a file inside `directory`."""
    base = Path(directory).resolve()
    path = (base / name).resolve()
    if path.parent != base or name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"file name {name!r} leaves the output directory {base}")
    return path


def make_dirs(directory: Path, file_mode: int = DEFAULT_FILE_MODE) -> Path:
    """Create `directory` and any missing parents with ``dir_mode(file_mode)``; existing ones are kept."""
    mode = dir_mode(check_file_mode(file_mode))
    directory = Path(directory)
    missing = []
    for each in (directory, *directory.parents):
        if each.exists():
            break
        missing.append(each)
    for each in reversed(missing):
        try:
            each.mkdir()
        except FileExistsError:  # created meanwhile by someone else: theirs, left as it is
            continue
        os.chmod(each, mode)  # mkdir's mode is cut by the umask; chmod is not
    return directory


def write_output(path: Path, data: bytes | str, file_mode: int = DEFAULT_FILE_MODE) -> Path:
    """Write `data` (text as UTF-8) to `path` whole, with `file_mode`; missing directories are created.

    Written to a temporary file in the same directory, given its mode, flushed, then
    renamed over `path`: a reader sees the old file or the new one, never half of one.
    """
    check_file_mode(file_mode)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path = Path(path)
    make_dirs(path.parent, file_mode)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:32]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), file_mode)  # mkstemp's 0600 is not the mode asked for
            file.write(raw)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
