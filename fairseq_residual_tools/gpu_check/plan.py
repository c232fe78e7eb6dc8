"""What the GPU check runs: its parts in order of value, each a group of runs that share the GPU at once.

1. ``precision``: Post-LN, Pre-LN and ResiDual at WMT E18D18 with --fp16, --memory-efficient-fp16
   --fp16-init-scale 8 (the authors' OPUS-100 setting), --amp and --bf16, 200 updates each, all twelve at once;
   ``torchrun`` (a launch through scripts/train.sh with the visible GPUs) runs beside them.
2. ``claims``: the paper's depth and warmup claims on the embedded corpus: Post-LN, Pre-LN and ResiDual at IWSLT
   E6D6 and E12D12 (d256), with and without warmup, ResiDual with ``--residual-output-scale 0.5`` beside the
   default (``--skip-output-scale`` leaves it out) and, with ``--with hc,siamese,attn-res`` (``--with-hc``: hc), the
   designs after ResiDual, all sixteen (four more each) at once for the time the budget leaves them, then each
   scored with BLEU (beam 5) on the held-out test set.
3. ``bench``: the benchmark on the GPU (stock Post-LN, stock Pre-LN, ResiDual, and the schemes of ``--with``;
   IWSLT E6D6, WMT E18D18).
4. ``compiled`` (opt-in: ``--with-compiled``): training throughput at WMT E6D6 in fp16 and bf16, stock Pre-LN eager
   beside ResiDual and the schemes of ``--with``, eager and under ``--torch-compile`` (bench/compiled.py).
5. ``fused-loss`` (opt-in: ``--with-fused-loss``): a training step with fairseq's label-smoothed cross-entropy and
   with the plugin's fused one, side by side (bench/fused_loss.py, ``--kernel auto``: Liger's or Cut Cross-Entropy's
   kernel where the node has it, else the torch path), Pre-LN and ResiDual at IWSLT and WMT E6D6 in fp16 and bf16.

Every run has an estimated time (estimate.py); the default parts fit ``BUDGET_S``. ``--cpu-tiny`` runs the same
parts on the CPU at tiny sizes: the check's own code path, end to end, without a GPU.
"""

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..commands import generate_command
from ..runner import PLUGIN_DIR, fairseq_command
from .estimate import GPU_TFLOPS, Estimator, Workload

ROOT = PLUGIN_DIR.parent
#: wall time of the default parts, in seconds: the GPU machine's run is at most 10 min, install included
BUDGET_S = 540.0
#: installing the bundle into a temporary folder and importing it (22 s on the simulated node)
BUNDLE_INSTALL_S = 30.0
#: preparing the embedded corpus (Moses, BPE, fairseq-preprocess; 21 s on the 2-core machine)
DATA_S = 30.0
#: torch.compile's inductor compilation of one E6D6 model, forward and backward, on the GPU machine's 16 cores:
#: on the H200 node a cold fp16 compile at WMT E6D6 had not finished 125 s after its process started (2026-12-04)
COMPILE_S = 180.0
#: the fused-loss part on the GPU: its sizes, precisions and schemes, and its timed and warm-up rounds per row
FUSED_LOSS_SIZES = ("iwslt-e6d6", "wmt-e6d6")
FUSED_LOSS_PRECISIONS = ("fp16", "bf16")
FUSED_LOSS_SCHEMES = ("pre", "residual")
FUSED_LOSS_STEPS, FUSED_LOSS_WARMUP, FUSED_LOSS_MIN_S = 10, 3, 3.0
#: the compiled part's precisions on the GPU, and its timed and warm-up steps per variant
COMPILED_PRECISIONS = ("fp16", "bf16")
COMPILED_STEPS, COMPILED_WARMUP, COMPILED_MIN_S = 10, 3, 5
PRECISIONS: Dict[str, List[str]] = {
    "fp16": ["--fp16"],
    "memory-efficient-fp16": ["--memory-efficient-fp16", "--fp16-init-scale", "8"],  # the authors' OPUS-100 setting
    "amp": ["--amp"],
    "bf16": ["--bf16"],  # fairseq's bf16 (fp32 master weights), without the TPU it implies (docs/patches.md)
}
SCHEMES = ("post", "pre", "residual")
#: the designs after ResiDual that ``--with`` adds to the claims and the benchmark: opt-in, as each one's four
#: trainings and bench variant take their time from the others (with hc, every claims training gets about 236
#: updates of the 428 it plans without it)
OPT_IN = ("hc", "siamese", "attn-res")
#: the claims' variant of ResiDual with its output scaled at init (docs/schemes.md): its label and its options
SCALED_RESIDUAL: Tuple[str, str, Tuple[str, ...]] = ("residual-c0.5", "residual", ("--residual-output-scale", "0.5"))
REFERENCE = "pre"
TORCHRUN_CELL = "iwslt14/residual/e6d6"
#: the embedded corpus at 4096 tokens a batch: ~290 sentences of ~14 BPE tokens, ~1,000 symbols (for the counts)
CORPUS_BATCH = (290, 14)
CORPUS_VOCAB = 1000
#: fp16 on the CPU: fairseq's FP16Optimizer moves its fp32 master copy with .cuda()
CPU_UNSUPPORTED = {"fp16": "fairseq's --fp16 needs CUDA (FP16Optimizer calls .cuda()); skipped on the CPU"}


@dataclass(frozen=True)
class Scale:
    """The sizes a check runs at: the GPU's, or tiny ones on the CPU (the same code path in seconds)."""

    cpu: bool
    precision_arch: str
    precision_layers: int
    precision_updates: int
    claims_depths: Tuple[int, ...]
    max_tokens: int
    width: Optional[Tuple[int, int, int]]  # (embed, FFN, heads) instead of the presets'
    torchrun_updates: int
    bench_sizes: str
    compiled_size: str
    claims_updates: Optional[int] = None  # fixed updates (the CPU path); None: as many as the time allows


GPU = Scale(
    False, "residual_transformer_wmt_en_de", 18, 200, (6, 12), 4096, None, 50, "iwslt-e6d6,wmt-e18d18", "wmt-e6d6"
)
CPU_TINY = Scale(
    True, "residual_transformer_iwslt_de_en", 2, 4, (1, 2), 512, (16, 32, 2), 3, "tiny", "tiny", claims_updates=12
)


@dataclass
class Run:
    label: str
    command: List[str]
    log: str
    estimate_s: float
    workload: Optional[Workload] = None
    #: a claims training's planned updates (its estimate; it stops at 4x that or when its time is up)
    planned_updates: Optional[int] = None
    skip: Optional[str] = None  # why this run is not run at this scale
    save_dir: Optional[Path] = None  # a claims training's checkpoint folder


@dataclass
class Part:
    name: str
    title: str
    runs: List[Run]
    estimate_s: float
    default: bool = True
    #: runs after the group, each needing one of the group's (the claims' BLEU scoring)
    then: List[Run] = field(default_factory=list)
    #: what the part's record keeps of its plan (the Bible part's recipe, groups and estimates)
    detail: Dict = field(default_factory=dict)


WIDTH_OPTIONS = ("embed_dim", "ffn_embed_dim", "attention_heads")


def _width_options(scale: Scale) -> List[object]:
    """The scale's (embed, FFN, heads) as fairseq-train options."""
    options: List[object] = []
    for side in ("encoder", "decoder"):
        for name, value in zip(WIDTH_OPTIONS, scale.width or ()):
            options += [f"--{side}-{name.replace('_', '-')}", value]
    return options


def _device_options(scale: Scale) -> List[object]:
    return ["--cpu"] if scale.cpu else []


def _time_limit(scale: Scale, seconds: float) -> List[object]:
    """fairseq-train's own stop after ``seconds`` of training, on the GPU (the CPU path's runs stop by their
    fixed updates: its times are not the budget's)."""
    return [] if scale.cpu else ["--stop-time-hours", f"{seconds / 3600:.4f}"]


def precision_command(databin, work: Path, scheme: str, precision: str, scale: Scale, stop_s: float) -> List[str]:
    """fairseq-train at the precision depth: no checkpoints, no validation, JSON logs every 10 updates; its
    ``--save-dir`` under ``work`` (fairseq makes that folder even with ``--no-save``: ./checkpoints otherwise)."""
    return fairseq_command(
        "train",
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", scale.precision_arch, "--residual-scheme", scheme),
        *("--encoder-layers", scale.precision_layers, "--decoder-layers", scale.precision_layers),
        *_width_options(scale),
        *("--share-all-embeddings", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4"),
        *("--lr-scheduler", "inverse_sqrt", "--warmup-updates", 100),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *("--max-tokens", scale.max_tokens, "--max-update", scale.precision_updates, "--no-save"),
        *("--save-dir", work / "precision", "--disable-validation", "--seed", 1, "--num-workers", 0),
        *_time_limit(scale, stop_s),
        *("--log-format", "json", "--log-interval", max(1, scale.precision_updates // 20)),
        *_device_options(scale),
        *PRECISIONS[precision],
    )


def claims_command(
    databin,
    save_dir: Path,
    scheme: str,
    layers: int,
    warmup: bool,
    updates: int,
    scale: Scale,
    stop_s: float,
    model_options: Sequence[object] = (),
) -> List[str]:
    """The paper's IWSLT model and settings (d256, dropout 0.3, Adam, lr 5e-4, label smoothing 0.1, 4096 tokens,
    fp32) at ``layers``, with ``model_options`` (ResiDual's output scale); warmup over a tenth of the planned
    updates from 1e-7, or none (starting at the peak). ``updates`` is the planned count; the run stops at 4x that
    or when its time is up, whichever first."""
    warmup_updates = max(10, updates // 10)
    return fairseq_command(
        "train",
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_iwslt_de_en", "--residual-scheme", scheme),
        *("--encoder-layers", layers, "--decoder-layers", layers, *_width_options(scale), *model_options),
        *("--share-all-embeddings", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4"),
        *("--weight-decay", "1e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", warmup_updates),
        *("--warmup-init-lr", "1e-7" if warmup else "5e-4"),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *("--max-tokens", scale.max_tokens, "--max-update", updates if scale.cpu else 4 * updates),
        *(*_time_limit(scale, stop_s), "--disable-validation", "--seed", 1, "--num-workers", 0),
        # one checkpoint, at the end (the BLEU scoring reads it), without Adam's state
        *("--save-dir", save_dir, "--save-interval", 10**6, "--no-save-optimizer-state", "--no-epoch-checkpoints"),
        *("--log-format", "json", "--log-interval", max(1, updates // 20)),
        *_device_options(scale),
    )


def claims_label(scheme: str, layers: int, warmup: bool) -> str:
    return f"{scheme} e{layers}d{layers} {'warmup' if warmup else 'no-warmup'}"


Variant = Tuple[str, str, Tuple[str, ...]]


def claims_variants(args) -> List[Variant]:
    """(label, scheme, model options) of every scheme the claims train: the chosen schemes, then ResiDual with its
    output scaled at init when ResiDual is one of them (unless ``--skip-output-scale``), then those of ``--with``."""
    variants: List[Variant] = [(scheme, scheme, ()) for scheme in args.schemes]
    if "residual" in args.schemes and not args.skip_output_scale:
        variants.append(SCALED_RESIDUAL)
    variants += [(scheme, scheme, ()) for scheme in args.with_schemes if scheme not in args.schemes]
    return variants


def bench_schemes(args) -> Tuple[str, ...]:
    """The benchmark's schemes beside stock Post-LN and Pre-LN: ResiDual, and the schemes of ``--with``."""
    return ("residual", *args.with_schemes)


def torchrun_command(databin, work: Path, gpus: int, scale: Scale) -> List[str]:
    """scripts/train.sh with torchrun on ``gpus`` GPUs (two gloo processes on the CPU path), the embedded corpus."""
    devices = ["--cpu", "--gpus", "2"] if scale.cpu else ["--gpus", str(gpus)]
    tiny = [
        f"model.{side}_{name}={value}"
        for side in ("encoder", "decoder")
        for name, value in zip(WIDTH_OPTIONS, scale.width or ())
    ]
    return [
        *("bash", str(ROOT / "scripts" / "train.sh"), "--cell", TORCHRUN_CELL, "--data", str(databin)),
        *devices,
        *("--launcher", "torchrun", "--work", str(work / "torchrun"), "--results", str(work / "torchrun-results")),
        "--",
        *(f"optimization.max_update={scale.torchrun_updates}", "task.source_lang=src", "task.target_lang=tgt"),
        *("task.eval_bleu=false", "dataset.disable_validation=true", "checkpoint.no_save=true", *tiny),
    ]


#: the benchmark on the GPU: one fresh process per size (the layouts of the CPU benchmark place host memory), more
#: rounds instead
BENCH_ROUNDS = {"layouts": 1, "warmup": 2, "rounds": 5, "generation_rounds": 5}


def bench_command(out: Path, scale: Scale, schemes: Sequence[str]) -> List[str]:
    device = ["--device", "cpu", "--threads", "1"] if scale.cpu else ["--device", "cuda"]
    device += [f"--{k.replace('_', '-')}={v}" for k, v in BENCH_ROUNDS.items()]
    return [
        sys.executable,
        str(ROOT / "scripts" / "bench.py"),
        *device,
        "--sizes",
        scale.bench_sizes,
        "--schemes",
        ",".join(schemes),
        "--out",
        str(out / "bench"),
    ]


def compiled_command(out: Path, scale: Scale, schemes: Sequence[str]) -> List[str]:
    device = ["--device", "cpu", "--backend", "aot_eager", "--steps", "2", "--warmup", "1", "--min-seconds", "0"]
    device += ["--precisions", "fp32"]
    if not scale.cpu:
        device = ["--device", "cuda", "--steps", str(COMPILED_STEPS), "--warmup", str(COMPILED_WARMUP)]
        device += ["--min-seconds", str(COMPILED_MIN_S), "--precisions", *COMPILED_PRECISIONS]
    return [
        sys.executable,
        "-m",
        "fairseq_residual_tools.bench.compiled",
        *device,
        "--sizes",
        scale.compiled_size,
        "--schemes",
        *schemes,
        "--out",
        str(out / "compiled"),
    ]


def fused_loss_command(out: Path, scale: Scale) -> List[str]:
    """bench/fused_loss.py: on the GPU its sizes in fp16 and bf16 with ``--kernel auto``; on the CPU path the tiny
    size in fp32, two rounds, the torch path (the part's code path in seconds)."""
    if scale.cpu:
        options = ["--device", "cpu", "--sizes", "tiny", "--precisions", "fp32", "--schemes", "residual"]
        options += ["--steps", "2", "--warmup", "1", "--min-seconds", "0"]
    else:
        options = ["--device", "cuda", "--kernel", "auto", "--sizes", *FUSED_LOSS_SIZES]
        options += ["--precisions", *FUSED_LOSS_PRECISIONS, "--schemes", *FUSED_LOSS_SCHEMES]
        options += ["--steps", str(FUSED_LOSS_STEPS), "--warmup", str(FUSED_LOSS_WARMUP)]
        options += ["--min-seconds", str(FUSED_LOSS_MIN_S)]
    return [sys.executable, "-m", "fairseq_residual_tools.bench.fused_loss", *options, "--out", str(out / "fused-loss")]


def _fused_loss_estimate(estimator: Estimator, scale: Scale, start: float) -> float:
    """A fresh process per size, precision and scheme (``start`` each) stepping both criteria in turn, its rounds
    at least ``FUSED_LOSS_MIN_S``; a step taken as the benchmark's update of that size (the loss is part of it)."""
    from ..bench.variants import SIZES

    if scale.cpu:
        return start
    total = 0.0
    for name in FUSED_LOSS_SIZES:
        for scheme in FUSED_LOSS_SCHEMES:
            step = estimator.update(_bench_workload(SIZES[name], scheme))
            rounds_s = max(FUSED_LOSS_MIN_S, 2 * FUSED_LOSS_STEPS * step) + 2 * FUSED_LOSS_WARMUP * step
            total += len(FUSED_LOSS_PRECISIONS) * (start + rounds_s)
    return total


def _compiled_estimate(estimator: Estimator, scale: Scale, schemes: Sequence[str], start: float) -> float:
    """A fresh process per scheme and precision (``start`` each) that steps stock Pre-LN, the scheme eager and the
    scheme compiled in turn (``COMPILE_S`` more for the compile)."""
    from ..bench.variants import SIZES

    size = SIZES.get(scale.compiled_size)  # None: the CPU path's tiny size
    rounds = COMPILED_STEPS + COMPILED_WARMUP

    def steps_s(scheme: str) -> float:
        return rounds * estimator.update(_bench_workload(size, scheme)) if size is not None else 0.0

    per_precision = sum(start + COMPILE_S + steps_s("pre") + 2 * steps_s(s) + 3 * COMPILED_MIN_S for s in schemes)
    return per_precision * (1 if scale.cpu else len(COMPILED_PRECISIONS))


def _corpus_workload(arch: str, layers: int, scheme: str) -> Workload:
    return Workload(arch, layers, scheme, CORPUS_VOCAB, *CORPUS_BATCH)


def workloads(scale: Scale = GPU) -> List[Workload]:
    """Every configuration whose counts the GPU plan's estimates read (``--calibrate`` counts them)."""
    from ..bench.variants import SIZES

    found = [_corpus_workload(scale.precision_arch, scale.precision_layers, s) for s in SCHEMES]
    found += [
        _corpus_workload("residual_transformer_iwslt_de_en", layers, s)
        for layers in scale.claims_depths
        for s in (*SCHEMES, *OPT_IN)
    ]
    for name in scale.bench_sizes.split(","):
        size = SIZES[name]
        found += [_bench_workload(size, s) for s in ("post", "pre", "residual", *OPT_IN)]
    return list(dict.fromkeys(found))


def _bench_workload(size, scheme: str) -> Workload:
    return Workload(size.arch, size.layers, scheme, size.vocab, size.batch, size.src_len)


def _bench_estimate(estimator: Estimator, scale: Scale, schemes: Sequence[str]) -> float:
    """Per size: a fresh process per layout and per memory probe (one per variant), each importing fairseq and
    starting CUDA, and the warm-up and timed rounds of training and of beam-5 generation (a generation is taken to
    cost about a training step) of every variant per layout: stock Post-LN and Pre-LN (as the plugin's post and
    pre, the same layers), then ``schemes``."""
    from ..bench.variants import SIZES

    r = BENCH_ROUNDS
    rounds = 2 * r["warmup"] + r["rounds"] + r["generation_rounds"]
    total = 0.0
    for name in scale.bench_sizes.split(","):
        size = SIZES.get(name)
        if size is None:  # the CPU path's tiny size
            continue
        steps = [estimator.update(_bench_workload(size, s)) for s in ("post", "pre", *schemes)]
        total += (r["layouts"] + len(steps)) * estimator.process_start() + r["layouts"] * rounds * sum(steps)
    return total


def corpus_root(args) -> Path:
    """Where the embedded corpus is prepared (``--work``/demo), or was (``--data-root``)."""
    return Path(args.data_root) if args.data_root else Path(args.work) / "demo"


def scale_of(args) -> Scale:
    scale = CPU_TINY if args.cpu_tiny else GPU
    return replace(scale, claims_depths=args.depths) if args.depths else scale


#: the parts, in the order they run; ``--only`` picks from these
PART_NAMES = ("precision", "claims", "bench", "compiled", "fused-loss", "bible")
#: the part that takes the whole window, run alone (``--only bible``): the paper's IWSLT model on the Bible (bible.py)
ALONE = "bible"


def chosen(args, name: str, default: bool) -> bool:
    """Whether part ``name`` runs: the parts of ``--only`` if given, else the default ones and the opt-in asked for."""
    only = getattr(args, "only", None)
    return name in only if only else default


def build(args, estimator: Estimator, gpus: int, spent: Optional[float] = None) -> List[Part]:
    """The parts, in order, with their runs' commands and estimates (``args``: the command line's). ``spent``: the
    seconds the check has run (a run rebuilds the plan before each part: the claims get the time left)."""
    scale = scale_of(args)
    out, work = Path(args.out), Path(args.work)
    databin = corpus_root(args) / "data-bin"
    start = estimator.startup()
    parts: List[Part] = []

    # 1. precision, with torchrun beside it
    runs: List[Run] = []
    precision_workloads = {s: _corpus_workload(scale.precision_arch, scale.precision_layers, s) for s in args.schemes}
    torchrun_workload = _corpus_workload("residual_transformer_iwslt_de_en", 6, "residual")
    reduced = len(args.precisions) * sum(estimator.counts(precision_workloads[s])["flops"] for s in args.schemes)
    # the GPU's time a round: the fp32 torchrun's FLOPs count as more reduced-precision ones, and the other way round
    speedup = GPU_TFLOPS["fp16"] / GPU_TFLOPS["fp32"]
    single = estimator.counts(torchrun_workload)["flops"]
    for precision in args.precisions:
        for scheme in args.schemes:
            w = precision_workloads[scheme]
            seconds = start + scale.precision_updates * estimator.update(w, precision, reduced + single * speedup)
            skip = CPU_UNSUPPORTED.get(precision) if scale.cpu else None
            cmd = precision_command(databin, work, scheme, precision, scale, stop_s=2 * seconds)
            runs.append(Run(f"{precision} {scheme}", cmd, f"{precision}-{scheme}.log", seconds, w, skip=skip))
    if not args.skip_torchrun:
        per_update = estimator.update(torchrun_workload, "fp32", single + reduced / speedup)
        seconds = 1.5 * start + scale.torchrun_updates * per_update
        runs.append(Run("torchrun", torchrun_command(databin, work, max(gpus, 1), scale), "torchrun.log", seconds))
    parts.append(
        Part(
            "precision",
            f"Precision at depth (E{scale.precision_layers}D{scale.precision_layers}), with "
            "a torchrun launch beside it",
            runs,
            max(r.estimate_s for r in runs if not r.skip),
            default=chosen(args, "precision", True),
        )
    )

    # 3. and 4. first, so that the claims get the time left over
    later: List[Part] = []
    if not args.skip_bench:
        schemes = bench_schemes(args)
        cmd = bench_command(out, scale, schemes)
        later.append(
            Part(
                "bench",
                "Benchmark on the GPU",
                [Run("bench", cmd, "bench.log", _bench_estimate(estimator, scale, schemes))],
                0.0,
                default=chosen(args, "bench", True),
            )
        )
    compiled_schemes = list(bench_schemes(args))
    compiled_s = _compiled_estimate(estimator, scale, compiled_schemes, start)
    later.append(
        Part(
            "compiled",
            "Training throughput: stock eager, plugin eager, plugin compiled",
            [Run("compiled", compiled_command(out, scale, compiled_schemes), "compiled.log", compiled_s)],
            0.0,
            default=chosen(args, "compiled", args.with_compiled),
        )
    )
    fused_s = _fused_loss_estimate(estimator, scale, start)
    later.append(
        Part(
            "fused-loss",
            "The fused loss beside fairseq's: step time and peak memory",
            [Run("fused-loss", fused_loss_command(out, scale), "fused-loss.log", fused_s)],
            0.0,
            default=chosen(args, "fused-loss", args.with_fused_loss),
        )
    )
    for part in later:
        part.estimate_s = sum(r.estimate_s for r in part.runs)

    # 2. claims: sixteen trainings at once for the time left, then sixteen BLEU scorings at once
    before = BUNDLE_INSTALL_S + DATA_S + parts[0].estimate_s * parts[0].default if spent is None else spent
    used = before + sum(p.estimate_s for p in later if p.default)
    later.append(_bible_part(args, scale, estimator, BUDGET_S - before, work / "logs"))
    score_s = start + 5.0
    train_s = max(60.0, BUDGET_S - used - score_s)
    claim_workloads = {
        (variant, d): _corpus_workload("residual_transformer_iwslt_de_en", d, variant[1])
        for d in scale.claims_depths
        for variant in claims_variants(args)
    }
    flops = 2 * sum(estimator.counts(w)["flops"] for w in claim_workloads.values())  # with and without warmup
    runs, scoring = [], []
    for ((variant, scheme, options), layers), w in claim_workloads.items():
        per_update = estimator.update(w, "fp32", flops)
        updates = scale.claims_updates or max(20, int((train_s - start) / per_update))
        for warmup in (True, False):
            label = claims_label(variant, layers, warmup)
            save_dir = work / "claims" / label.replace(" ", "-")
            cmd = claims_command(
                databin, save_dir, scheme, layers, warmup, updates, scale, stop_s=train_s - start, model_options=options
            )
            name = label.replace(" ", "-")
            runs.append(
                Run(
                    label,
                    cmd,
                    f"claims-{name}.log",
                    start + updates * per_update,
                    w,
                    planned_updates=updates,
                    save_dir=save_dir,
                )
            )
            generate = generate_command(databin, save_dir, cpu=scale.cpu)
            scoring.append(Run(label, generate, f"bleu-{name}.log", score_s, save_dir=save_dir))
    claims = Part(
        "claims",
        "The paper's depth and warmup claims on the embedded corpus",
        runs,
        train_s + score_s,
        default=chosen(args, "claims", True),
        then=scoring,
    )
    return [parts[0], claims, *later]


def _bible_part(args, scale: Scale, estimator: Estimator, seconds: float, logs: Path) -> Part:
    """5. bible (opt-in, alone): the paper's IWSLT model on real text for ``seconds`` (bible.py); without ``--only
    bible`` a placeholder, so that a plan without it neither reads the Bible data nor counts its models."""
    if chosen(args, ALONE, False):
        from . import bible

        return bible.build_part(args, scale, estimator, seconds, logs)
    title = "The paper's IWSLT model on the Bible (alone, with the whole window: --only bible)"
    return Part(ALONE, title, [], 0.0, default=False)


def default_seconds(parts: List[Part]) -> float:
    """The planned wall time of the default parts, the bundle install and the data included."""
    return BUNDLE_INSTALL_S + DATA_S + sum(p.estimate_s for p in parts if p.default)
