"""The cells of the paper's tables: a dataset, a residual scheme and a depth, e.g. ``iwslt14/residual/e6d6``
(``/nowarmup`` for the warmup ablation). A cell's config is ``configs/<dataset>.yaml`` plus ``Cell.overrides``.
"""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from fairseq_residual.schemes import SCHEMES

from ..errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "configs"
PAPER_DIR = ROOT / "results" / "paper"
NOT_IMPLEMENTED = "scheme not implemented"


#: fairseq-generate's settings for IWSLT-14 and OPUS-100: the authors' validation-BLEU settings
DECODING = {"beam": 5, "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10}
#: WMT's, B2T's released protocol (takase/b2t_connection), whose scores the paper's WMT baselines are: beam 4, length
#: penalty 1.0 (0.6 on newstest2014: ``WMT_DECODING_BY_TEST_SET``), fairseq's default maximum length
WMT_DECODING = {"beam": 4, "lenpen": 1.0}
WMT_DECODING_BY_TEST_SET: Dict[str, Dict[str, object]] = {"newstest2014": {"lenpen": 0.6}}
AVERAGE_LAST = 5  # checkpoints averaged (WMT: 10, B2T's protocol)


@dataclass(frozen=True)
class Dataset:
    name: str  # also its config, configs/<name>.yaml
    data: str  # default data-bin (relative to the repository root), from data-prep/
    checkpoints: str  # averaged: "epoch": checkpoint<epoch>.pt; "update": checkpoint_<epoch>_<update>.pt
    scoring: str  # the description written next to every score; {case}: the data's case, from data prep
    average: int = AVERAGE_LAST  # the last checkpoints averaged
    decoding: Dict[str, object] = field(default_factory=lambda: dict(DECODING))  # fairseq-generate's options
    decoding_by_test_set: Dict[str, Dict[str, object]] = field(default_factory=dict)  # what differs for one

    def decoding_for(self, test_set: str) -> Dict[str, object]:
        """fairseq-generate's options for the test set named ``test_set``."""
        return {**self.decoding, **self.decoding_by_test_set.get(test_set, {})}


DATASETS: Dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            "iwslt14",
            "data-bin/iwslt14.de-en/bin",
            "epoch",
            "BLEU of fairseq-generate (--remove-bpe): tokenised {case}, BPE removed -- the paper's IWSLT-14 figure; "
            "sacrebleu: Moses-detokenised hypotheses against the test set's untouched text as released "
            "(-lc where data prep lowercased: see the signature)",
        ),
        Dataset(
            "wmt14",
            "data-bin/wmt14.en-de/bin",
            "update",
            "sacrebleu of Moses-detokenised hypotheses against the official references (the SGML text sacrebleu -t "
            "reads) per newstest2010-2016, and its average -- the paper's WMT figure, B2T's protocol (the last 10 "
            "checkpoints averaged, beam 4, length penalty 0.6 on newstest2014 and 1.0 on the others); bleu: "
            "tokenised BLEU with compound splitting (fairseq's compound_split_bleu: a-b -> a ##AT##-##AT## b in "
            "hypothesis and reference) per test set, and its average",
            average=10,
            decoding=dict(WMT_DECODING),
            decoding_by_test_set=WMT_DECODING_BY_TEST_SET,
        ),
        Dataset(
            "opus100",
            "data-bin/opus100/bin",
            "update",
            "sacrebleu per direction on SentencePiece-decoded text against the release's test files (tokenize 13a; "
            "zh for Chinese targets); EX = mean over English->X, XE = mean over X->English, "
            "ALL = mean over all directions -- the paper's OPUS-100 figures",
        ),
    )
}

_NAME = re.compile(
    r"^(?P<dataset>[a-z0-9]+)/(?P<scheme>[a-z0-9_]+)/e(?P<enc>\d+)d(?P<dec>\d+)(?P<nowarmup>/nowarmup)?$"
)


@dataclass(frozen=True)
class Cell:
    dataset: str
    scheme: str
    encoder_layers: int
    decoder_layers: int
    warmup: bool = True

    @property
    def name(self) -> str:
        name = f"{self.dataset}/{self.scheme}/e{self.encoder_layers}d{self.decoder_layers}"
        return name if self.warmup else f"{name}/nowarmup"

    @property
    def implemented(self) -> bool:
        return self.scheme in SCHEMES

    def overrides(self) -> List[str]:
        """Hydra overrides that turn the dataset's config into this cell's."""
        depth = [f"model.encoder_layers={self.encoder_layers}", f"model.decoder_layers={self.decoder_layers}"]
        return [f"model.residual_scheme={self.scheme}", *depth, *([] if self.warmup else ["+warmup=none"])]


def parse_cell(name: str) -> Cell:
    m = _NAME.match(name.strip().strip("/"))
    if not m:
        raise ConfigError(
            f"cell {name!r} is not DATASET/SCHEME/eNdM[/nowarmup] (e.g. iwslt14/residual/e6d6); "
            "`bash scripts/reproduce.sh --list` lists the paper's cells"
        )
    if m["dataset"] not in DATASETS:
        raise ConfigError(f"unknown dataset {m['dataset']!r} in cell {name!r}; choose one of: {', '.join(DATASETS)}")
    known = set(SCHEMES) | {c.scheme for c in paper_cells()}
    if m["scheme"] not in known:
        raise ConfigError(f"unknown scheme {m['scheme']!r} in cell {name!r}; choose one of: {', '.join(sorted(known))}")
    return Cell(m["dataset"], m["scheme"], int(m["enc"]), int(m["dec"]), warmup=not m["nowarmup"])


@dataclass
class TableRow:
    method: str
    scheme: str
    paper: Dict[str, object]  # column -> figure (float) or "fails"
    warmup: bool = True
    depth: Optional[str] = None  # set when the columns are metrics of one cell (OPUS-100)


@dataclass
class PaperTable:
    table: str
    title: str
    dataset: str
    columns: List[str]
    rows: List[TableRow]
    source: str
    note: str
    metric: Optional[str] = None  # the score read for every column, when columns are depths
    decimals: int = 2  # as the paper prints its figures
    label: str = "paper"

    def cell_and_metric(self, row: TableRow, column: str) -> Tuple[Cell, str]:
        """The cell measured for (row, column) and the key of its score."""
        depth, metric = (row.depth, column) if row.depth else (column, self.metric)
        m = re.fullmatch(r"E(\d+)D(\d+)", depth or "", flags=re.I)
        if m is None or metric is None:
            raise ValueError(f"{self.dataset} table: no depth or metric for row {row.method!r}, column {column!r}")
        return Cell(self.dataset, row.scheme, int(m[1]), int(m[2]), warmup=row.warmup), metric

    def cells(self) -> List[Cell]:
        """Every cell of the table, in row order, each once."""
        return list(dict.fromkeys(self.cell_and_metric(row, column)[0] for row in self.rows for column in self.columns))


def paper_tables() -> Dict[str, PaperTable]:
    tables = {}
    for name in ("iwslt14", "wmt14", "opus100", "warmup_ablation"):  # in the paper's order
        data = json.loads((PAPER_DIR / f"{name}.json").read_text(encoding="utf-8"))
        tables[data["table"]] = PaperTable(rows=[TableRow(**row) for row in data.pop("rows")], **data)
    return tables


def paper_cells(table: str = "all") -> List[Cell]:
    """Every cell of one table (or of all tables, each once), in table order."""
    tables = paper_tables()
    if table != "all" and table not in tables:
        raise ConfigError(f"unknown table {table!r}; choose one of: {', '.join(tables)}, all")
    chosen = tables.values() if table == "all" else [tables[table]]
    return list(dict.fromkeys(cell for t in chosen for cell in t.cells()))
