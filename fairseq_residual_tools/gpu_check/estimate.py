"""How long each run of the GPU check takes, estimated before any GPU has run it.

A fairseq-train update of these models is bound by dispatch, not arithmetic: an IWSLT E6D6 step is about
3,000 aten operations (forward, label-smoothed loss, backward, and fairseq's Adam, a Python loop over the
parameters) for 0.28 TFLOP, which an H200 does in a few milliseconds, while the host spends ~10 us on each
operation it launches. So an update takes

    t_update = max(ops x (t_op + t_launch) x k_precision,  sum over the runs sharing the GPU of FLOPs / R)

ops and FLOPs are counted exactly (``count_step``, with the benchmark's ``bench.counts``: every aten operation that
launches work, FLOPs by ``torch.utils.flop_counter``'s formulas); t_op is the host's time per operation, measured
here on the CPU by timing the same step at a tiny width, where arithmetic is negligible (``calibrate``); the
fairseq-train start-up is measured here too. t_launch, R (the GPU's effective throughput at these small matrix
sizes), the reduced-precision op factor and the start-up of the CUDA context are assumptions, named below; the GPU
run records its real times beside these estimates (report.md), which is how the next run's figures are corrected.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from argparse import Namespace
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Optional, Sequence

#: seconds the host spends launching one CUDA kernel beyond dispatching the operation (assumed)
LAUNCH_S = 5e-6
#: effective TFLOP/s of an H200 on these models' matrix sizes, runs sharing it: measured on the H200 on 2026-12-04
#: (results/gpu-check/h200; the counted FLOPs of every run's median updates/s, summed), then x CONTENTION, as
#: ``update`` divides by it: the sixteen fp32 claims trainings (IWSLT E6D6 and E12D12) did 11.4 TFLOP/s together, the
#: twelve reduced-precision ones at WMT E18D18 (fp16, memory-efficient fp16, AMP, bf16) 56. The figures assumed
#: before that run, 25 and 200, had the claims plan 1.35x (E6D6) to 2.25x (E12D12) the updates they reached.
GPU_TFLOPS = {"fp32": 14.0, "fp16": 70.0}
#: operations of an fp16 / AMP step relative to fp32 (casts, loss scaling, the fp32 master copy; assumed)
REDUCED_PRECISION_OPS = 1.3
#: CUDA context and cuDNN/cuBLAS initialisation per process, beyond the CPU start-up (assumed)
CUDA_START_S = 5.0
#: time-slicing between processes on one GPU: concurrent runs' updates stretch by this factor (assumed)
CONTENTION = 1.25
#: the width at which the host's time per operation is measured (arithmetic negligible)
TINY_WIDTH = (16, 32, 2)


@dataclass(frozen=True)
class Workload:
    """One fairseq-train configuration: a preset at a depth on batches of ``sentences`` x ``length`` tokens."""

    arch: str
    layers: int
    scheme: str
    vocab: int
    sentences: int
    length: int

    @property
    def key(self) -> str:
        return f"{self.arch}/e{self.layers}d{self.layers}/{self.scheme}/v{self.vocab}/{self.sentences}x{self.length}"


def _model(workload: Workload, width=None, device="meta"):
    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    from ..bench.steps import SyntheticTask
    from ..bench.variants import Size, model_args

    size = Size(
        workload.key,
        workload.arch,
        workload.layers,
        workload.vocab,
        workload.sentences,
        workload.length,
        workload.length,
        1,
        1,
        width=width,
    )
    task = SyntheticTask(workload.vocab)
    args = Namespace(**dict(model_args(size), arch="residual_transformer", residual_scheme=workload.scheme))
    torch.manual_seed(0)
    with torch.device(device):
        model = ARCH_MODEL_REGISTRY["residual_transformer"].build_model(args, task)
    return model, task


def _loss(model, sample):
    """fairseq-train's loss: forward and label-smoothed cross-entropy."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    target = sample["target"].view(-1)
    return label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), target, 0.1, ignore_index=1)[0]


def _step(model, sample, optimizer):
    """What fairseq-train does in one update: the loss, backward, fairseq's Adam."""
    _loss(model, sample).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def count_step(workload: Workload) -> Dict[str, float]:
    """aten operations and FLOPs of one fairseq-train update of ``workload`` (fp32, exact).

    A stack is a loop over identical layers, so both are linear in the depth for schemes whose layers do not
    read each other's outputs (not DLCL): they are counted at depths 1 and 2 and extended (tested against a
    direct count)."""
    if workload.layers <= 2 or workload.scheme == "dlcl":
        return count_at_depth(workload)
    one, two = (count_at_depth(replace(workload, layers=n)) for n in (1, 2))
    return {key: one[key] + (workload.layers - 1) * (two[key] - one[key]) for key in one}


def count_at_depth(workload: Workload) -> Dict[str, float]:
    """``count_step`` counted directly.

    The operations do not depend on the width or the batch: they are counted at ``TINY_WIDTH`` on one sentence.
    The FLOPs are the matrix products' (Adam has none), counted in the forward and backward at full width on one
    sentence, with the parameters allocated but not initialised (zeros: what is counted is what runs, not its
    values), and scaled by the batch: they grow with it linearly at a fixed length, attention's too."""
    import torch
    from fairseq.optim.adam import Adam

    from ..bench.counts import count
    from ..bench.steps import synthetic_batch

    tiny, task = _model(workload, width=TINY_WIDTH, device="cpu")
    tiny.train()
    sample = synthetic_batch(task, 1, workload.length, workload.length)
    optimizer = Adam(tiny.parameters(), lr=1e-4)
    _step(tiny, sample, optimizer)  # uncounted: Adam's state exists, as in every later update
    ops = count(lambda: _step(tiny, sample, optimizer))["ops"]
    model = _model(workload)[0].to_empty(device="cpu")
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.zero_()
    model.train()
    flops = count(lambda: _loss(model, sample).backward())["flops"]
    return {"ops": ops, "flops": float(flops) * workload.sentences}


def host_seconds_per_op(workload: Workload, steps: int = 10) -> float:
    """The host's seconds per aten operation: the same update at a tiny width on the CPU, one thread, timed."""
    import torch
    from fairseq.optim.adam import Adam

    from ..bench.counts import count
    from ..bench.steps import synthetic_batch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one launching thread, as a training process's host side
    try:
        model, task = _model(workload, width=TINY_WIDTH, device="cpu")
        model.train()
        sample = synthetic_batch(task, 8, 6, 6)
        optimizer = Adam(model.parameters(), lr=1e-4)
        for _ in range(3):
            _step(model, sample, optimizer)
        ops = count(lambda: _step(model, sample, optimizer))["ops"]
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            _step(model, sample, optimizer)
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times) / ops


def startup_seconds(databin: Path, work: Path) -> float:
    """Seconds from starting fairseq-train (a tiny model on ``databin``) to its first logged update, on the CPU."""
    from ..runner import PLUGIN_DIR, fairseq_command

    cmd = fairseq_command(
        "train",
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_iwslt_de_en"),
        *("--encoder-layers", 1, "--decoder-layers", 1, "--encoder-embed-dim", 16, "--decoder-embed-dim", 16),
        *("--encoder-ffn-embed-dim", 32, "--decoder-ffn-embed-dim", 32, "--share-all-embeddings"),
        *("--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 1024, "--max-update", 1, "--no-save"),
        *("--disable-validation", "--cpu", "--log-format", "json", "--log-interval", 1, "--num-workers", 0),
    )
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=work)
    return time.perf_counter() - start


def import_seconds() -> float:
    """Seconds a fresh Python takes to import torch, fairseq and the plugin (a benchmark process's start)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, fairseq, fairseq_residual"], check=True, capture_output=True)
    return time.perf_counter() - start


def calibrate(workloads: Sequence[Workload], databin: Path, work: Path) -> Dict:
    """What the estimates need from this machine's CPU: the host's time per operation (the median over the
    workloads' depths) and fairseq-train's start-up."""
    from ..provenance import provenance

    depths = {(w.arch, w.layers): w for w in workloads}.values()
    per_op = {w.key: host_seconds_per_op(w) for w in depths}
    return {
        "provenance": provenance(),
        "host_seconds_per_op": statistics.median(per_op.values()),
        "host_seconds_per_op_by_depth": per_op,
        "startup_s": startup_seconds(databin, work),
        "import_s": import_seconds(),
        # the figures are the CPU's time when it is not shared: read them beside the load
        "load_average": os.getloadavg(),
    }


class Estimator:
    """Seconds of the check's runs, from ``calibrate``'s record and the workloads' counts (made when first asked)."""

    def __init__(self, record: Dict):
        self.record = record
        self._counts: Dict[str, Dict[str, float]] = {}

    @classmethod
    def load(cls, path: Path) -> "Estimator":
        from ..errors import UserError

        if not Path(path).is_file():
            raise UserError(f"no estimate inputs at {path}: make them with bash scripts/gpu_check.sh --calibrate")
        return cls(json.loads(Path(path).read_text()))

    def measure_host(self) -> float:
        """The host's time per operation measured on this machine now (IWSLT E6D6 ResiDual), in place of the
        calibration machine's: on the GPU node, before its plan (the calibration's is a loaded 2-core machine's,
        about twice the H200 node's dispatch). Returns it; the calibration's is kept as
        ``host_seconds_per_op_calibrated``."""
        measured = host_seconds_per_op(Workload("residual_transformer_iwslt_de_en", 6, "residual", 1000, 290, 14))
        self.record.setdefault("host_seconds_per_op_calibrated", self.record["host_seconds_per_op"])
        self.record["host_seconds_per_op"] = measured
        return measured

    def counts(self, workload: Workload) -> Dict[str, float]:
        if workload.key not in self._counts:
            self._counts[workload.key] = count_step(workload)
        return self._counts[workload.key]

    def startup(self) -> float:
        """A fairseq-train process's seconds to its first update."""
        return self.record["startup_s"] + CUDA_START_S

    def process_start(self) -> float:
        """A process's seconds to import torch and fairseq and start CUDA."""
        return self.record["import_s"] + CUDA_START_S

    def update(self, workload: Workload, precision: str = "fp32", gpu_flops: Optional[float] = None) -> float:
        """Seconds per update of ``workload`` when runs whose FLOPs per update add up to ``gpu_flops`` share the GPU
        (default: it alone)."""
        counts = self.counts(workload)
        factor = 1.0 if precision == "fp32" else REDUCED_PRECISION_OPS
        host = counts["ops"] * (self.record["host_seconds_per_op"] + LAUNCH_S) * factor
        tflops = GPU_TFLOPS["fp32" if precision == "fp32" else "fp16"]
        gpu = (counts["flops"] if gpu_flops is None else gpu_flops) / (tflops * 1e12)
        return max(host, gpu) * (CONTENTION if gpu_flops is not None else 1.0)


def describe_assumptions() -> str:
    return (
        f"host time per operation measured on the CPU, plus {LAUNCH_S * 1e6:g} us per kernel launch; "
        f"effective GPU throughput {GPU_TFLOPS['fp32']:g} TFLOP/s fp32, {GPU_TFLOPS['fp16']:g} fp16/AMP; "
        f"x{REDUCED_PRECISION_OPS:g} operations in reduced precision; {CUDA_START_S:g} s CUDA start-up per "
        f"process; x{CONTENTION:g} for runs sharing the GPU (assumed figures, corrected by the GPU run)"
    )
