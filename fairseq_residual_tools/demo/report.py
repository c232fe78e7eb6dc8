"""Writing the demo's results: JSON, a markdown table and a validation-loss plot."""

import json
from pathlib import Path


def read_valid_losses(log_file):
    """[(num_updates, valid_loss), ...] from a fairseq ``--log-format json`` log file."""
    points = []
    for line in open(log_file, encoding="utf-8"):
        brace = line.find("{")
        if brace < 0 or '"valid_loss"' not in line:
            continue
        record = json.loads(line[brace:])
        points.append((int(record["valid_num_updates"]), float(record["valid_loss"])))
    # a resumed run logs again from the restored update: keep the last value per update
    return sorted(dict(points).items())


def collect_versions():
    import fairseq
    import sacrebleu
    import torch

    return {"fairseq": fairseq.__version__, "torch": torch.__version__, "sacrebleu": sacrebleu.__version__}


def plot_valid_loss(rows, path):
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's logging is verbose

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for row in rows:
        if row["valid_losses"]:
            steps, losses = zip(*row["valid_losses"])
            ax.plot(steps, losses, marker="o", label=row["scheme"])
    ax.set_xlabel("updates")
    ax.set_ylabel("validation loss (label-smoothed CE, base 2)")
    ax.set_title("Embedded demo corpus, CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(rows, meta, out):
    out = Path(out)
    (out / "results.json").write_text(json.dumps({"rows": rows, **meta}, indent=2) + "\n")
    lines = [
        "| scheme | test BLEU (sacrebleu) | final valid loss | train wall time (s) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        loss = "n/a" if r["final_valid_loss"] is None else f"{r['final_valid_loss']:.3f}"
        lines.append(f"| {r['scheme']} | {r['bleu']:.2f} | {loss} | {r['train_seconds']:.0f} |")
    table = "\n".join(lines)
    s = meta["settings"]
    body = f"""# Demo: Post-LN vs Pre-LN vs ResiDual on the embedded synthetic corpus

Measured by `{meta["command"]}` (what `make demo` runs) on {meta["date"]}
({meta["wall_seconds"]:.0f} s wall for this invocation; load average at its start
{" / ".join(map(str, meta["load_average_at_start"]))}; the schemes trained {s.get("jobs", 1)} at a time, one thread
each: train times include any time other jobs took).
A small-scale CPU sanity run on a synthetic language pair, **not** a reproduction of any of
the paper's tables.

{table}

- Model: E{s["layers"]}D{s["layers"]}, width {s["dim"]}, FFN {4 * s["dim"]}, 4 heads, shared embeddings;
  Adam, lr {s["lr"]}, inverse_sqrt with {s["warmup"]} warmup updates, {s["max_update"]} updates of
  {s["max_tokens"]} tokens, seed {s["seed"]}; {s["train_pairs"]} training pairs.
- BLEU: sacrebleu on detokenised beam-5 output of `fairseq-generate` ({rows[0]["bleu_signature"]}).
- Machine: {meta["machine"]}. Versions: {", ".join(f"{k} {v}" for k, v in meta["versions"].items())}.
- Validation-loss curves: [valid_loss.png](valid_loss.png); every number: [results.json](results.json).
- Exact training command of each row: `results.json` -> `rows[].train_command`.
"""
    (out / "README.md").write_text(body)
    return table
