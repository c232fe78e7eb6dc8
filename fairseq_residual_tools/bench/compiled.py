"""One scheme trained eagerly and under ``torch.compile`` side by side, in one process: time per training
step after warm-up, the compile's first step, and the losses of both.

    python -m fairseq_residual_tools.bench.compiled --device cuda --size wmt-e18d18 --out compiled.json

Both models start from the same weights and train on the same synthetic batch (``steps.TrainingStep``'s
loss and Adam). Dropout draws differ between eager and compiled code, so with dropout (the preset's,
the default) the losses agree in trend, not digit for digit; ``--dropout 0`` makes them comparable to
rounding. On a CPU inductor's kernels are slower than eager's (FACTS.md): claim a speed-up on GPUs only.
"""

import argparse
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

from ..provenance import provenance
from .variants import SIZES, TINY, Variant


def train(model, sample, steps: int, warmup: int, device: str) -> Dict:
    """Seconds of each step (the first ``warmup`` apart) and the loss of every step."""
    import torch

    from .steps import TrainingStep

    step = TrainingStep(model, sample)
    seconds: List[float] = []
    losses: List[float] = []
    for _ in range(warmup + steps):
        start = time.perf_counter()
        loss = step.loss()
        loss.backward()
        step.optimizer.step()
        step.optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    timed = seconds[warmup:]
    return {"first_step_s": seconds[0], "step_s": statistics.median(timed), "losses": losses}


def measure(size, scheme: str, device: str, backend: str, steps: int, warmup: int, dropout: Optional[float]) -> Dict:
    import torch

    from .steps import SyntheticTask, synthetic_batch
    from .variants import build_variant

    task = SyntheticTask(size.vocab)
    sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, device=device)
    runs = {}
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()
        model = build_variant(Variant(scheme, scheme, scheme), size, task, device)  # seed 0: the same weights
        if dropout is not None:
            for module in model.modules():
                if hasattr(module, "p") and type(module).__name__ == "FairseqDropout":
                    module.p = dropout
        run_model = torch.compile(model, backend=backend) if mode == "compiled" else model
        runs[mode] = train(run_model, sample, steps, warmup, device)
        del model, run_model
    return {
        "compiled_over_eager_speed": runs["eager"]["step_s"] / runs["compiled"]["step_s"],
        "first_loss_difference": abs(runs["compiled"]["losses"][0] - runs["eager"]["losses"][0]),
        **runs,
    }


def outcome(record: Dict) -> str:
    """The result as one line (gpu_check's report)."""
    eager, compiled = record["eager"], record["compiled"]
    return (
        f"{record['scheme']} at {record['size']['name']}, {record['backend']}: compiled / eager training speed "
        f"{record['compiled_over_eager_speed']:.3f} ({compiled['step_s']:.3f} s vs {eager['step_s']:.3f} s per step; "
        f"the compiling first step {compiled['first_step_s']:.1f} s); last loss {compiled['losses'][-1]:.3f} "
        f"compiled, {eager['losses'][-1]:.3f} eager"
    )


def parse_args(argv):
    sizes = {**SIZES, TINY.name: TINY}
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.bench.compiled",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--size", default="wmt-e18d18", choices=list(sizes), help="model size and batch")
    parser.add_argument("--scheme", default="residual", help="residual_transformer --residual-scheme")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (default: inductor)")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps of each model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (the compile among them)")
    parser.add_argument("--dropout", type=float, default=None, help="dropout of every layer (default: the preset's)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    args.size = sizes[args.size]
    return args


def main(argv=None) -> Dict:
    from ..files import write_json

    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda, but torch sees no CUDA GPU: run on a GPU machine or use --device cpu")
    size = args.size
    record = {
        "command": " ".join(["python -m fairseq_residual_tools.bench.compiled", *(argv or sys.argv[1:])]),
        "scheme": args.scheme,
        "size": asdict(size),
        "device": args.device,
        "backend": args.backend,
        "dropout": args.dropout,
        **measure(size, args.scheme, args.device, args.backend, args.steps, args.warmup, args.dropout),
        "provenance": provenance(),
    }
    write_json(args.out, record)
    print(outcome(record), flush=True)
    return record


if __name__ == "__main__":
    main()
