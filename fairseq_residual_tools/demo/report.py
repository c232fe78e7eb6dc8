"""The demo's results: the table, sample translations, training curves and a reading.

Everything here is written from the measured rows (one per scheme and depth); the reading states what happened at
each depth, also when it is not what the paper reports.
"""

from itertools import groupby
from pathlib import Path
from typing import Dict, List, Optional

from ..files import write_json, write_text
from ..markdown import block_of, table, write_block
from ..provenance import describe, describe_git
from ..training_log import RULE

NAMES = {"post": "Post-LN", "pre": "Pre-LN", "residual": "ResiDual"}
#: the lines around the demo's table in docs/results.md: ``publish`` rewrites what is between them
BLOCK_START = "<!-- the demo's table, written from results/demo/results.json by `make demo-results`: do not edit -->"
BLOCK_END = "<!-- end of the demo's table -->"


def name(row: Dict) -> str:
    return NAMES.get(row["scheme"], row["scheme"])


def depth_label(layers: int, depth: Optional[Dict] = None) -> str:
    """``E12D12``, and ``E12D12 without warmup`` for a setting that starts at its peak lr."""
    no_warmup = depth is not None and depth.get("warmup_init_lr") == depth["lr"]
    return f"E{layers}D{layers}" + (" without warmup" if no_warmup else "")


def row_depth(row: Dict) -> str:
    return depth_label(row["layers"], row.get("depth"))


def describe_depth(d: Dict) -> str:
    """``E12D12: width 64 (FFN 256, 4 heads), lr 0.002 ..., 300 updates of at most 1024 tokens``."""
    if d.get("warmup_init_lr") == d["lr"]:
        schedule = f"lr {d['lr']:g} from the first update (no warmup), inverse_sqrt decay after {d['warmup']} updates"
    else:
        schedule = f"lr {d['lr']:g} after {d['warmup']} warmup updates"
    return (
        f"{depth_label(d['layers'])}: width {d['dim']} (FFN {4 * d['dim']}, 4 heads), {schedule}, "
        f"{d['max_update']} updates of at most {d['max_tokens']} tokens"
    )


def results_table(rows: List[Dict]) -> str:
    """Scheme x depth: test BLEU, final validation loss, and the "fails" verdict with its reason."""

    def cells(r: Dict) -> List[str]:
        valid_loss = "n/a" if r["final_valid_loss"] is None else f"{r['final_valid_loss']:.2f}"
        verdict = f"**fails**: {r['fails']}" if r["fails"] else "trained"
        return [row_depth(r), name(r), f"{r['bleu']:.1f}", valid_loss, verdict]

    return table(["depth", "scheme", "test BLEU", "final valid loss", "fails rule"], map(cells, rows))


def _list(items: List[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def reading(rows: List[Dict]) -> str:
    """One sentence from the measured verdicts and BLEU scores, depth by depth."""
    parts = []
    for label, at in groupby(rows, key=row_depth):
        trained: List[Dict] = []
        failed: List[Dict] = []
        for r in at:
            (failed if r["fails"] else trained).append(r)
        if not trained:
            parts.append(f"at {label} every scheme failed by the rule")
            continue
        scores = _list([f"{name(r)} {r['bleu']:.1f}" for r in trained])
        if failed:
            failing, training = _list(list(map(name, failed))), _list(list(map(name, trained)))
            parts.append(f"at {label} {failing} failed by the rule while {training} trained (test BLEU {scores})")
        else:
            parts.append(f"at {label} every scheme trained (test BLEU {scores})")
    deepest = max(r["layers"] for r in rows)
    fails = {r["scheme"]: bool(r["fails"]) for r in rows if r["layers"] == deepest}
    if {"post", "residual"} <= fails.keys() and (fails["residual"] or not fails["post"]):
        parts[-1] += ", so this run does not show Post-LN failing where ResiDual trains"
    return "Measured: " + "; ".join(parts) + "."


def samples(rows: List[Dict], sources: List[str], references: List[str], count: int) -> str:
    """The first ``count`` test sentences: source, reference and every model's output."""
    lines = []
    for i, (source, reference) in enumerate(zip(sources[:count], references)):
        lines += [f"{i + 1}. source: {source}", f"   - reference: {reference}"]
        lines += [f"   - {name(r)} {row_depth(r)}: {r['samples'][i]}" for r in rows]
    return "\n".join(lines)


def shared(meta: Dict) -> str:
    """The note for a wall time taken while other work kept more than every CPU busy: not the demo's speed."""
    cpus = meta["provenance"]["machine"]["cpu_count"] or 1
    if meta["load_average_at_start"][0] <= cpus:
        return ""
    return f": the machine's {cpus} CPUs were shared with other work, so this is not the demo's speed"


def write_report(rows: List[Dict], meta: Dict, sources: List[str], references: List[str], out) -> str:
    """results.json, curves.png and README.md in ``out``; returns the text printed on the console."""
    from ..analysis.plotting import plot_loss_curves  # matplotlib: loaded only to draw

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    panels: Dict[str, list] = {label: [(r, name(r), {}) for r in at] for label, at in groupby(rows, key=row_depth)}
    suptitle, ylabel = "make demo: the embedded synthetic corpus on CPU", "training loss (label-smoothed CE, base 2)"
    plot_loss_curves(panels, "train_curve", out / "curves.png", suptitle, ylabel, columns=len(panels))
    write_json(out / "results.json", {**meta, "rows": rows})
    s = meta["settings"]
    c = s["corpus"]
    budgets = "\n".join(f"  - {describe_depth(d)}" for d in s["depths"])
    summary = f"""{results_table(rows)}

{reading(rows)}

"fails" is the project's rule (`fairseq_residual_tools/training_log.py`): {RULE}.

Sample test sentences (the first {s["samples"]}; every model's detokenised beam-{s["beam"]} output):

{samples(rows, sources, references, s["samples"])}"""
    body = f"""# make demo: Post-LN, Pre-LN and ResiDual on the embedded synthetic corpus

Measured by `{meta["command"]}`: {meta["wall_seconds"]:.0f} s wall for this
invocation (load average at its start {" / ".join(map(str, meta["load_average_at_start"]))}{shared(meta)};
{meta["jobs"]} trainings at a time, one torch thread each; {meta["reused"]} of {len(rows)} trainings reused
from an earlier invocation). A small CPU run on a synthetic language pair, **not** a reproduction of the
paper's tables.

{summary}

Training curves: [curves.png](curves.png). Every number, each run's curves and exact fairseq commands:
[results.json](results.json).

## Setting (configs/demo.yaml)

- Corpus: the embedded synthetic pair (`fairseq_residual_tools/demo/corpus.py`, seed {s["seed"]}: SVO source,
  SOV target with gender/number agreement; {c["nouns"]} nouns, {c["adjectives"]} adjectives, {c["verbs"]} verbs,
  {c["adverbs"]} adverbs), {c["train"]} training / {c["valid"]} valid / {c["test"]} held-out test pairs,
  Moses tokens, joint BPE ({c["bpe_merges"]} merges).
- Models and budgets (the same for every scheme at a depth); dropout 0.1, shared embeddings, Adam (0.9, 0.98),
  inverse_sqrt (warmup from 1e-7 unless said otherwise), label-smoothed CE 0.1, fp32, seed {s["seed"]}:
{budgets}
- BLEU: sacrebleu on the Moses-detokenised beam-{s["beam"]} output of `fairseq-generate` (max length
  1.2 x source + 10), against the raw references ({next((r["bleu_signature"] for r in rows), "")}).
- {describe(meta["provenance"])}
"""
    write_text(out / "README.md", body)
    return summary


def published_block(results: Dict) -> str:
    """What docs/results.md shows of a results.json: its table and reading, and the code and date."""
    made = f"code {describe_git(results['provenance']['git'])}, {results['provenance']['date'][:10]}"
    return (
        f"{results_table(results['rows'])}\n\n{reading(results['rows'])}\n\nFrom `results/demo/results.json` ({made})."
    )


def published(page: Path) -> str:
    """The demo block of ``page`` as it stands."""
    return block_of(page, BLOCK_START, BLOCK_END)


def publish(results: Dict, pages) -> None:
    """Replace the demo block of every page in ``pages`` with ``published_block(results)``."""
    for page in pages:
        write_block(page, BLOCK_START, BLOCK_END, published_block(results))
