"""What the four ``prepare-*`` entry points share: the parser, options, archive extraction, error reporting."""

import argparse
import logging
import os
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Callable, List, Optional

from ..errors import DataError, exit_on_user_error
from ..files import atomic_outputs
from .download import Checksums, fetch


def recipe_parser(name: str, doc: str) -> argparse.ArgumentParser:
    """The parser of ``fairseq-residual-prepare-<name>`` (``data-prep/prepare-<name>.sh``); its description is
    the first paragraph of the recipe's ``doc``."""
    return argparse.ArgumentParser(
        prog=f"fairseq-residual-prepare-{name}",
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_common_options(parser: argparse.ArgumentParser, default_out: Optional[str], base_url_env: Optional[str] = None):
    """The options every recipe has (``--out`` is required without ``default_out``), and with
    ``base_url_env`` those of downloading; returns ``parser``."""
    parser.add_argument(
        "--out",
        required=default_out is None,
        help="output folder: bin/ (the fairseq data-bin), text/ (subword text and BPE "
        "codes / SentencePiece model, for BLEU), tmp/ (intermediate text), downloads/"
        + ("" if default_out is None else f"; default {default_out}"),
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="processes for tokenisation, subwords and fairseq-preprocess",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="redo every stage (verified archives are kept; delete them to download again)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    if base_url_env is None:
        return parser
    parser.add_argument(
        "--download-dir",
        help="where archives are kept (default OUT/downloads); "
        "archives placed there by hand are verified like downloads",
    )
    parser.add_argument(
        "--base-url",
        default=os.environ.get(base_url_env),
        help=f"mirror replacing the folder part of every archive URL (https://, file:// "
        f"or a local folder); default ${base_url_env}",
    )
    parser.add_argument(
        "--checksums", help="checksums file (default $FAIRSEQ_RESIDUAL_CHECKSUMS or the package's checksums.json)"
    )
    parser.add_argument(
        "--record-checksum", action="store_true", help="pin the sha256 of an archive that has no recorded checksum yet"
    )
    return parser


def run_main(prepare: Callable, build_parser: Callable, argv: Optional[List[str]] = None) -> int:
    """Parse, log to stdout, prepare, and report a user error as one line ``error: ...`` with exit status 1."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        stream=sys.stdout,
        force=True,
    )
    return exit_on_user_error(prepare, args)


def check_languages(args, langs, recipe: str):
    """``--src`` and ``--tgt`` are the two ``langs`` of a recipe made for one pair (``recipe`` says which)."""
    a, b = langs
    if {args.src, args.tgt} != {a, b}:
        raise DataError(
            f"{recipe}: use --src {a} --tgt {b} or --src {b} --tgt {a} (got --src {args.src} --tgt {args.tgt})"
        )


def extract_archive(stages, stage: str, name: str, members, dest: Path, strip="", **options):
    """Stage ``stage``: fetch archive ``name`` with the command line's download options and extract ``members``
    into the folder ``dest``, less the prefix ``strip`` of their paths. ``members`` are paths inside the archive,
    or a function choosing them from the set of its paths. The stage's record holds the archive's pinned checksum
    (pinning one with ``--record-checksum`` changes it once, so the extraction is redone once)."""
    args = stages.args
    checksums = Checksums(args.checksums)
    archive = checksums.archive(name)
    download_dir = Path(args.download_dir or stages.out / "downloads")

    def fetch_and_extract():
        path = fetch(archive, download_dir, checksums, args.base_url, args.record_checksum, args.quiet)
        try:
            with tarfile.open(path) as tar, atomic_outputs([Path(dest)]) as (tmp,):
                names = set(tar.getnames())
                wanted = members(names) if callable(members) else members
                missing = [m for m in wanted if m not in names]
                if missing:
                    raise DataError(
                        f"archive {path} lacks {', '.join(missing)}: not the expected release "
                        f"(it holds {len(names)} entries)"
                    )
                chosen = [tar.getmember(m) for m in wanted]
                for member in chosen:
                    member.name = member.name.removeprefix(strip)
                tar.extractall(tmp, members=chosen, filter="data")
        except DataError:
            raise
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise DataError(f"cannot read archive {path}: {e}") from None

    stages.run(stage, [dest], fetch_and_extract, {"archive": name, "sha256": archive.sha256 or archive.md5, **options})
