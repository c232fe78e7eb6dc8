"""What the GPU check writes: summaries of its logs and report.md."""

import json
import math
import re
import statistics
from typing import Any, Callable, Dict, List, Optional

from ..markdown import table
from ..provenance import describe
from ..training_log import RULE, json_record
from .plan import REFERENCE

PAPER_WARMUP = "results/paper/warmup_ablation.json"


def summarise_training(text: str) -> dict:
    """Losses, loss-scale history, tokens/s and the least free GPU memory of one fairseq-train log."""
    parsed = (json_record(line) for line in text.splitlines() if "train_inner" in line)
    records = [r for r in parsed if r is not None and "num_updates" in r and "loss" in r]
    losses = [(int(r["num_updates"]), float(r["loss"])) for r in records]
    scales = [(int(r["num_updates"]), float(r["loss_scale"])) for r in records if "loss_scale" in r]
    wps = [float(r["wps"]) for r in records[1:] if "wps" in r]  # the first interval includes start-up
    free = [float(r["gb_free"]) for r in records if "gb_free" in r]  # on a GPU: total minus peak allocated
    return {
        "updates": losses[-1][0] if losses else 0,
        "losses": losses,
        "loss_finite": bool(losses) and all(math.isfinite(x) for _, x in losses),
        "loss_scale": scales,
        "overflow_messages": len(re.findall(r"gradient overflow detected", text)),
        "tokens_per_s": statistics.median(wps) if wps else None,
        "gpu_gb_free_min": min(free) if free else None,
    }


def speed_ratios(runs: Dict[str, dict]) -> Dict[str, float]:
    """Each scheme's tokens/s divided by Pre-LN's (one precision)."""
    reference = runs.get(REFERENCE, {}).get("tokens_per_s")
    return {s: r["tokens_per_s"] / reference for s, r in runs.items() if reference and r.get("tokens_per_s")}


def torchrun_outcome(text: str) -> str:
    """World size and ranks joined, from a torchrun training log (the config fairseq logs, its init lines)."""
    world = re.findall(r"'distributed_world_size': (\d+)", text)
    # fairseq logs "initialized host ... as rank N" once a process group (NCCL on GPUs) is up
    ranks = re.findall(r"initialized host .* as rank (\d+)", text)
    return f"world size {world[0] if world else 'not logged'}, ranks in a process group: {sorted(set(ranks))}"


def bench_outcome(bench: dict) -> str:
    """The benchmark's targets (``bench.json``'s ratios to stock Pre-LN), as one line."""
    from ..bench.report import target_checks

    checks = [
        f"{c['what']} {c['value']:.3f}{_interval(c)} ({c['target']}: {c['verdict']})" for c in target_checks(bench)
    ]
    return "; ".join(checks) + "; the tables are in bench/bench.md"


def _interval(check: dict) -> str:
    return f" [{check['interval'][0]:.3f}–{check['interval'][1]:.3f}]" if "interval" in check else ""


def _precision_table(precision: Dict[str, Dict[str, dict]]) -> str:
    headers = [
        "precision",
        "scheme",
        "loss finite",
        "updates",
        "last loss",
        "loss scale (first, min, last)",
        "tokens/s",
        "/ Pre-LN",
        "GPU GB free (min)",
    ]
    rows = []
    for name, runs in precision.items():
        ratios = speed_ratios({s: r for s, r in runs.items() if "error" not in r and "skipped" not in r})
        for scheme, run in runs.items():
            if "error" in run or "skipped" in run:
                rows.append([name, scheme, f"failed: {run['error']}" if "error" in run else run["skipped"], *[""] * 6])
                continue
            scales = [s for _, s in run["loss_scale"]]
            scale = f"{scales[0]:g}, {min(scales):g}, {scales[-1]:g}" if scales else "-"
            last = f"{run['losses'][-1][1]:.3f}" if run["losses"] else "-"
            speed = f"{run['tokens_per_s']:.0f}" if run["tokens_per_s"] else "-"
            ratio = f"{ratios[scheme]:.3f}" if scheme in ratios else "-"
            free = f"{run['gpu_gb_free_min']:.1f}" if run.get("gpu_gb_free_min") is not None else "-"
            rows.append([name, scheme, str(run["loss_finite"]), str(run["updates"]), last, scale, speed, ratio, free])
    return table(headers, rows)


def _claim_cell(run: Optional[dict]) -> str:
    if run is None:
        return "not run"
    if "error" in run:
        return f"failed: {run['error']}"
    verdict = f"fails ({run['fails']})" if run["fails"] else "trained"
    bleu = f"{run['bleu']:.2f}" if run.get("bleu") is not None else "no BLEU"
    return f"{bleu}, {verdict}, {run['updates']} updates"


#: the claims' variants the paper has no row for (plan.SCALED_RESIDUAL): their method column
VARIANT_METHODS = {"residual-c0.5": "ResiDual, --residual-output-scale 0.5", "hc": "Hyper-Connections (4 streams)"}


Cell = Callable[[Optional[dict]], str]


def claims_table(claims: Dict[str, dict], depths, paper: dict, cell: Cell = _claim_cell) -> str:
    """Measured cells (``cell``: by default BLEU, the fails rule, updates reached) beside the paper's warmup
    ablation; a variant the paper does not have (ResiDual with its output scaled at init) follows with empty paper
    cells."""
    headers = (
        ["method", "warmup"] + [f"E{d}D{d} (measured)" for d in depths] + [f"{c} (paper)" for c in paper["columns"]]
    )
    trained = dict.fromkeys(label.split()[0] for label in claims)
    extra: List[Dict[str, Any]] = [
        {"method": VARIANT_METHODS.get(name, name), "scheme": name, "warmup": warmup, "paper": {}}
        for name in trained
        if name not in {row["scheme"] for row in paper["rows"]}
        for warmup in (True, False)
    ]
    rows = []
    for row in paper["rows"] + extra:
        measured = [
            cell(claims.get(f"{row['scheme']} e{d}d{d} {'warmup' if row['warmup'] else 'no-warmup'}")) for d in depths
        ]
        rows.append(
            [
                row["method"],
                "yes" if row["warmup"] else "no",
                *measured,
                *[str(row["paper"].get(c, "-")) for c in paper["columns"]],
            ]
        )
    return table(headers, rows)


def _bible_cell(run: Optional[dict]) -> str:
    if run is None:
        return "not run"
    if run.get("fails"):
        return f"fails ({run['fails']})"
    if run.get("sacrebleu") is None:
        return f"no BLEU: {run.get('error') or run.get('score_error') or 'not scored'}"
    return f"{run['sacrebleu']:.2f} ({run['bleu']:.2f}), {run['epochs']} epochs"


def bible_tables(bible: dict, paper: dict) -> List[str]:
    """The Bible part's runs (the rule, epochs, validation, the plateau rule, BLEU, time against the estimate), then
    its sacreBLEU beside the paper's warmup ablation."""
    from .bible import describe_plan

    rows = []
    for label, run in bible["runs"].items():
        plateau = run.get("plateau_update")
        measured = run.get("seconds_per_update")
        rows.append(
            [
                label,
                f"{run.get('epochs', 0)} / {bible['epochs']}",
                str(run.get("updates", 0)),
                run.get("fails") or run.get("error") or "trained",
                f"{run['best_valid_loss']:.3f}" if run.get("best_valid_loss") is not None else "-",
                "not reached" if plateau is None else f"update {plateau}",
                f"{run['bleu']:.2f}" if run.get("bleu") is not None else "-",
                f"{run['sacrebleu']:.2f}" if run.get("sacrebleu") is not None else "-",
                f"{measured:.3f} ({run['estimated_seconds_per_update']:.3f})" if measured else "-",
                f"{run['seconds']:.0f} ({run['estimate_s']:.0f})" if run.get("seconds") is not None else "-",
            ]
        )
    headers = ["run", "epochs", "updates", "the rule", "best valid loss", "plateau rule", "BLEU (tok.)", "sacreBLEU"]
    headers += ["s / update (estimate)", "s (estimate)"]
    signatures = sorted({r["sacrebleu_signature"] for r in bible["runs"].values() if r.get("sacrebleu_signature")})
    return [
        describe_plan(bible),
        "",
        f"The rule: {RULE}. The plateau rule (where it would have stopped the run; measured, not used): "
        f"{bible['plateau_rule']}. sacreBLEU against the untouched test verses: {', '.join(signatures) or '-'}. "
        "Seconds per update from the log (validations and saves included), beside the time model's.",
        "",
        table(headers, rows),
        "",
        "sacreBLEU (tokenised BLEU) on the Bible's test verses, beside the paper's IWSLT-14 figures (another corpus: a "
        "pattern to compare with):",
        "",
        claims_table(bible["runs"], bible["depths"], paper, cell=_bible_cell),
    ]


def timing_table(timings: List[dict]) -> str:
    rows = [
        [
            t["part"],
            f"{t['estimate_s']:.0f}",
            "not run" if t.get("seconds") is None else f"{t['seconds']:.0f}",
            t.get("note", ""),
        ]
        for t in timings
    ]
    return table(["part", "estimated s", "measured s", "note"], rows)


def report_markdown(record: dict, root) -> str:
    paper = json.loads((root / PAPER_WARMUP).read_text())
    scale = "on the CPU at tiny sizes (the check's code path; no GPU figure)" if record["cpu_tiny"] else "on the GPU"
    lines = [
        "# GPU check",
        "",
        f"Command: `{record['command']}`  ",
        describe(record["provenance"]),
        "",
        f"Run {scale}. GPUs: {', '.join(record['gpus']) or 'none'} (CUDA {record['cuda']}). Bundle: "
        f"{record.get('bundle') or 'none (the active environment)'}.",
        "",
        "## Time per part",
        "",
        timing_table(record["timings"]),
        "",
        f"Estimates: {record['assumptions']}.",
    ]
    if "precision" in record:
        lines += ["", "## Precision at depth", "", _precision_table(record["precision"])]
    if "claims" in record:
        lines += [
            "",
            "## The paper's depth and warmup claims, on the embedded corpus",
            "",
            "Measured here: test BLEU (sacrebleu, beam 5) of the synthetic corpus's held-out test set, the project's "
            f"fails rule ({RULE}), and the updates each training reached in its time. The paper's columns are the "
            "paper's figures (IWSLT-14 De-En, trained to convergence): a pattern to compare with, not the same task.",
            "",
            claims_table(record["claims"], record["claims_depths"], paper),
        ]
    if "bible" in record:
        lines += ["", "## The paper's IWSLT model on real text: the Bible, Spanish to English", ""]
        lines += bible_tables(record["bible"], paper)
    for key, title in [
        ("torchrun", "torchrun through scripts/train.sh"),
        ("bench", "Benchmark on the GPU"),
        ("compiled", "Training throughput: stock eager, plugin eager, plugin compiled"),
        ("fused-loss", "The fused loss beside fairseq's: step time and peak memory"),
    ]:
        if key in record:
            lines += ["", f"## {title}", "", f"`{record[key]['command']}`: {record[key]['outcome']}"]
    if record.get("packages"):
        lines += ["", "## Packages on this machine", "", ", ".join(f"{k} {v}" for k, v in record["packages"].items())]
    return "\n".join(lines) + "\n"
