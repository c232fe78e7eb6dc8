"""How often ``--torch-compile`` compiles while fairseq's batches change shape: graphs compiled in each epoch of a
real training (fairseq's Trainer on the demo corpus), with torch.compile's automatic dynamic shapes (what the option
uses) beside static shapes with lengths padded to a multiple (``--required-seq-len-multiple``).

    python -m fairseq_residual_tools.bench.recompiles --out results/bench/compiled/recompiles.json

Graphs and recompiles are dynamo's, the same for every backend; ``aot_eager`` keeps the run to minutes on a CPU.
"""

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List

from ..provenance import provenance

TINY_MODEL = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32"]
TINY_MODEL += ["--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
TINY_MODEL += ["--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]


class _LimitWarnings(logging.Handler):
    """dynamo's warnings that a function reached its recompile limit (it runs eagerly from then on)."""

    def __init__(self):
        super().__init__()
        self.lines: List[str] = []

    def emit(self, record):
        if "recompile_limit" in record.getMessage():
            self.lines.append(record.getMessage())


def graphs_per_epoch(databin: Path, epochs: int, dynamic: bool, multiple: int, max_tokens: int) -> Dict:
    """Graphs dynamo compiled during each epoch, the batches' distinct shapes, and whether it ever ran eagerly
    because a function reached dynamo's recompile limit."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer
    from torch._dynamo.utils import counters

    import fairseq_residual  # noqa: F401  (registers the model)

    torch._dynamo.reset()
    torch._dynamo.config.automatic_dynamic_shapes = dynamic
    argv = [str(databin), "--arch", "residual_transformer_iwslt_de_en", *TINY_MODEL, "--share-all-embeddings"]
    argv += ["--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy", "--cpu"]
    argv += ["--max-tokens", str(max_tokens), "--seed", "1", "--required-seq-len-multiple", str(multiple)]
    argv += ["--torch-compile", "--torch-compile-backend", "aot_eager"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    torch.manual_seed(1)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    catcher = _LimitWarnings()
    logging.getLogger("torch._dynamo").addHandler(catcher)
    counters.clear()
    per_epoch: List[Dict] = []
    for epoch in range(1, epochs + 1):
        before = counters["stats"]["unique_graphs"]
        shapes = set()
        batches = trainer.get_train_iterator(epoch=epoch, load_dataset=False).next_epoch_itr(shuffle=True)
        count = 0
        for sample in batches:
            count += 1
            net_input = sample["net_input"]
            shapes.add((tuple(net_input["src_tokens"].shape), tuple(net_input["prev_output_tokens"].shape)))
            trainer.train_step([sample])
        per_epoch.append(
            {
                "epoch": epoch,
                "batches": count,
                "shapes": len(shapes),
                "graphs": counters["stats"]["unique_graphs"] - before,
            }
        )
    logging.getLogger("torch._dynamo").removeHandler(catcher)
    return {
        "automatic_dynamic_shapes": dynamic,
        "required_seq_len_multiple": multiple,
        "epochs": per_epoch,
        "cache_limit_hits": len(catcher.lines),
        "recompile_limit": torch._dynamo.config.recompile_limit,
    }


def main(argv=None) -> Dict:
    from ..demo.prepare import prepare_demo_data
    from ..files import write_json

    parser = argparse.ArgumentParser(prog="python -m fairseq_residual_tools.bench.recompiles", description=__doc__)
    parser.add_argument("--work", type=Path, default=Path("work/recompiles"), help="where the demo data-bin is made")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    databin = prepare_demo_data(args.work, train=2000, valid=40, test=40, bpe_merges=400).databin
    record: Dict[str, Any] = {
        "command": " ".join(["python -m fairseq_residual_tools.bench.recompiles", *(argv or sys.argv[1:])]),
        "settings": [
            graphs_per_epoch(databin, args.epochs, dynamic=True, multiple=1, max_tokens=args.max_tokens),
            graphs_per_epoch(databin, args.epochs, dynamic=False, multiple=8, max_tokens=args.max_tokens),
        ],
        "provenance": provenance(),
    }
    write_json(args.out, record)
    for s in record["settings"]:
        epochs = ", ".join(f"epoch {e['epoch']}: {e['graphs']} graphs ({e['shapes']} shapes)" for e in s["epochs"])
        print(
            f"automatic dynamic {s['automatic_dynamic_shapes']}, lengths a multiple of "
            f"{s['required_seq_len_multiple']}: {epochs}; recompile limit reached {s['cache_limit_hits']} times"
        )
    return record


if __name__ == "__main__":
    main()
