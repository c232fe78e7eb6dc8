"""Resumable, checksum-verified downloads of the corpora's release archives listed in ``checksums.json``.

A download goes to ``<name>.part``, resumes from its length (HTTP ``Range``; ``file://`` URLs and paths are read
from the same offset) and becomes ``<name>`` once its size and checksum match, ``<name>.corrupt`` if not.
Mirrors and the sources of the checksums: "Downloads" in data-prep/README.md.
"""

import hashlib
import io
import json
import logging
import os
import shutil
import urllib.error
import urllib.request
from collections import namedtuple
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

from ..errors import DataError
from ..files import write_json
from .formats import progress_bar

logger = logging.getLogger(__name__)

DEFAULT_CHECKSUMS = Path(__file__).with_name("checksums.json")
CHUNK = 1 << 20


Archive = namedtuple("Archive", ["name", "url", "size", "sha256", "md5"])  # a checksums.json entry (size: bytes)


class Checksums:
    """The archives' records, read from (and, with ``record``, written to) one JSON file."""

    def __init__(self, path=None):
        self.path = Path(path or os.environ.get("FAIRSEQ_RESIDUAL_CHECKSUMS") or DEFAULT_CHECKSUMS)
        if not self.path.is_file():
            raise DataError(f"checksums file {self.path} does not exist")
        try:
            self.data = json.loads(self.path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"checksums file {self.path} is not valid JSON: {e}") from None

    def archive(self, name: str) -> Archive:
        entry = self.data.get("archives", {}).get(name)
        if entry is None:
            raise DataError(f"no entry for archive {name} in {self.path}")
        return Archive(name, entry["url"], entry.get("size"), entry.get("sha256"), entry.get("md5"))

    def record(self, name: str, sha256: str, size: int):
        entry = self.data.setdefault("archives", {}).setdefault(name, {})
        entry.update(sha256=sha256, size=size, source="pinned with --record-checksum by the first download")
        write_json(self.path, self.data, sort_keys=True)


def _blocks(f, progress):
    """The rest of the open file ``f`` in blocks, counted on ``progress``."""
    for block in iter(lambda: f.read(CHUNK), b""):
        progress.update(len(block))
        yield block


def _open(url: str, offset: int):
    """``url`` read from byte ``offset``, and the offset it really starts at: 0 where a server ignores the range."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        local = Path(unquote(parsed.path) if parsed.scheme else url)
        if not local.is_file():
            raise DataError(f"missing file {local} (from URL {url})")
        f = open(local, "rb")
        f.seek(offset)
        return f, offset
    request = urllib.request.Request(url, headers={"User-Agent": "fairseq_residual-dataprep"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:  # nothing left to fetch: the part file is complete
            return io.BytesIO(), offset
        raise DataError(f"download of {url} failed: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise DataError(
            f"download of {url} failed: {getattr(e, 'reason', e)}; re-run to resume, or point --base-url to a mirror"
        ) from None
    return response, offset if response.status == 206 else 0


def _transfer(url: str, part: Path, total: Optional[int], quiet: bool):
    """Append the rest of ``url`` to ``part`` (which may hold a prefix already)."""
    offset = part.stat().st_size if part.exists() else 0
    source, start = _open(url, offset)
    if start != offset:
        logger.info("%s: server does not resume, restarting the download", url)
        part.unlink()
    progress = progress_bar(f"download {part.name[:-5]}", total=total, unit="B", quiet=quiet, start=start)
    with source, progress, open(part, "ab") as out:
        out.writelines(_blocks(source, progress))


def fetch(archive: Archive, dest_dir: Path, checksums: Checksums, base_url=None, record_checksum=False, quiet=False):
    """Download (or resume) ``archive`` into ``dest_dir`` and return the verified file."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / archive.name
    if final.exists():
        candidate = final
    else:
        candidate = dest_dir / (archive.name + ".part")
        url = f"{base_url.rstrip('/')}/{archive.name}" if base_url else archive.url
        logger.info("downloading %s from %s", archive.name, url)
        _transfer(url, candidate, archive.size, quiet)
    verify(archive, candidate, checksums, record_checksum, quiet)
    if candidate != final:
        os.replace(candidate, final)
    return final


def _reject(path: Path, problem: str):
    bad = path.with_name(path.name.replace(".part", "") + ".corrupt")
    shutil.move(str(path), str(bad))
    raise DataError(f"{problem}; moved it to {bad} (delete it and re-run to download again)")


def verify(archive: Archive, path: Path, checksums: Checksums, record_checksum=False, quiet=False):
    size = path.stat().st_size
    if archive.size is not None and size != archive.size:
        what = "truncated" if size < archive.size else "too large"
        _reject(path, f"archive {path} is {what}: {size} bytes, expected {archive.size}")
    expected = archive.sha256 or archive.md5  # the md5 only where no sha256 is on record
    algorithm = "md5" if expected and not archive.sha256 else "sha256"
    h = hashlib.new(algorithm)
    with open(path, "rb") as f, progress_bar(f"{algorithm} {archive.name}", total=size, unit="B", quiet=quiet) as bar:
        for block in _blocks(f, bar):
            h.update(block)
    digest = h.hexdigest()
    if expected is None:
        if not record_checksum:
            raise DataError(
                f"no checksum is recorded for {archive.name} in {checksums.path}; the downloaded "
                f"file {path} has sha256 {digest}: check it against a trusted source, then re-run "
                "with --record-checksum to pin it"
            )
        checksums.record(archive.name, digest, size)
        logger.info("recorded sha256 %s for %s in %s", digest, archive.name, checksums.path)
    elif digest != expected:
        _reject(path, f"archive {path} has {algorithm} {digest}, expected {expected} (corrupt download or wrong file)")
