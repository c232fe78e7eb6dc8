"""Side-by-side speed and memory of the residual schemes and fairseq's stock transformer.

What is compared, for each size (``SIZES``), with the same synthetic batches:

* fairseq's stock ``transformer`` in Post-LN and Pre-LN form (``--encoder/decoder-normalize-before``);
* ``residual_transformer`` with the size's schemes (``Size.schemes``: the plugin's own
  Post-LN and Pre-LN, which should cost exactly what the stock ones cost, and ResiDual;
  ``None``, as in the test suite's tiny size, means every scheme in ``schemes.SCHEMES``).

Training: one forward + backward + Adam step on fairseq's label-smoothed cross entropy
(epsilon 0.1), fp32, dropout as in the preset. Generation: fairseq's ``SequenceGenerator``
with beam 5 and incremental decoding; ``min_len`` = ``max_len`` so that every model
decodes the same number of steps whatever its (random) weights prefer.

Each size is measured in a process of its own (``measure_size_in_fresh_process``), as
one training job trains one size: glibc's malloc adapts to the allocations a process has
seen, and a size measured after others would inherit their heap history.

Timing: after warm-up, repetitions are interleaved (A B C A B C ...), so slow phases
of a shared machine hit every variant alike; each variant's ratio to stock Pre-LN is
taken within one round, and reported as min / median / max over the rounds. Where a
model's tensors land in memory depends on what was allocated before it, and that alone
makes one instance of a model a few percent faster or slower than another instance of
the same model for the life of a process; so a size is measured in several processes
("layouts"), each building and running the variants in a rotated order, and the rounds
of all layouts are pooled. The measuring processes run with glibc malloc set to keep
freed memory (``MALLOC_SETTINGS``), as PyTorch's caching allocator does on a GPU. The
targets are on wall time; user CPU time and minor page faults are recorded beside it,
because on CPU glibc's malloc returns freed memory to the kernel and maps it in again,
and how often depends on a model's allocation pattern, not on its arithmetic.

Memory, measured on each variant's training step in a fresh process of its own (so that
no variant inherits another's allocator state), after one untimed step:

* ``peak_mb``: parameters + buffers + Adam state (counted exactly from the tensors) plus
  the peak, during one step, of the bytes of live tensors the step allocated (torch's
  profiler records every CPU allocation and free): activations, gradients, temporaries.
  This is the figure the memory target is checked on;
* ``rss_rise_mb``: the rise of the process's peak resident memory during one step
  (Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` after ``malloc_trim``):
  what the operating system sees, glibc's heap fragmentation included;
* ``saved_mb``: bytes of the distinct storages that autograd keeps for backward,
  summed through ``torch.autograd.graph.saved_tensors_hooks`` (parameters excluded);
  it names the tensors a scheme keeps alive.
"""

import ctypes
import gc
import itertools
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from argparse import Namespace
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator
from torch.profiler import ProfilerActivity, profile

from fairseq_residual.schemes import SCHEMES

#: the variant every ratio is taken against
REFERENCE = "stock-pre"
#: targets of issue 6 (medians): ResiDual vs stock Pre-LN, plugin Post/Pre-LN vs stock
TARGETS = {"residual_train": 0.97, "residual_memory": 1.05, "residual_generate": 0.97, "plugin_vs_stock": 0.02}
#: glibc malloc settings of the processes that measure (``--malloc``); see ``malloc_environment``
MALLOC_SETTINGS = {
    # keep freed memory: every block comes from the heap (no mmap, whose munmap hands the
    # pages back) and the heap is never trimmed, so after warm-up a step maps in no new
    # pages, as with PyTorch's caching allocator on a GPU
    "keep": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)},
    # glibc's defaults (dynamic mmap and trim thresholds)
    "default": {},
}
LABEL_SMOOTHING = 0.1
BEAM = 5


@dataclass(frozen=True)
class Size:
    """One model size and the batches it is measured on."""

    name: str
    #: a residual_transformer preset (``--arch``) giving widths, heads and dropout
    arch: str
    layers: int
    vocab: int
    #: training batch: sentences x fixed source / target length
    batch: int
    src_len: int
    tgt_len: int
    #: generation batch (sentences) and the exact number of tokens generated per hypothesis
    gen_batch: int
    gen_len: int
    #: the residual_transformer schemes measured (beside stock Post-LN and Pre-LN); None: all registered
    schemes: Optional[Tuple[str, ...]] = None
    #: (embed_dim, ffn_dim, heads) instead of the preset's, for the test suite's tiny size
    width: Optional[Tuple[int, int, int]] = None


SIZES = {
    s.name: s
    for s in (
        # the other schemes (DeepNet, B2T, Admin, T-Fixup, DLCL): ``scripts/bench.py --schemes all``
        Size(
            "iwslt-e6d6", "residual_transformer_iwslt_de_en", 6, 10000, 64, 32, 32, 16, 24, ("post", "pre", "residual")
        ),
        Size("wmt-e6d6", "residual_transformer_wmt_en_de", 6, 32000, 32, 32, 32, 8, 24, ("post", "pre", "residual")),
        # 150M parameters: with Adam, 2.3 GB per variant held at once, so ResiDual only
        Size("wmt-e18d18", "residual_transformer_wmt_en_de", 18, 32000, 16, 32, 32, 4, 24, ("residual",)),
    )
}
#: a size small enough for the test suite
TINY = Size("tiny", "residual_transformer_iwslt_de_en", 2, 60, 4, 7, 6, 2, 5, width=(16, 32, 2))


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    #: residual_transformer's --residual-scheme, or None for fairseq's stock transformer
    scheme: Optional[str] = None
    #: stock transformer only: Pre-LN (True) or Post-LN (False)
    normalize_before: bool = False


def variants(schemes: Optional[Sequence[str]] = None) -> List[Variant]:
    """Stock Post-LN and Pre-LN, then ``schemes`` (default: every registered one) in SCHEMES order."""
    stock = [
        Variant("stock-post", "fairseq transformer, Post-LN", None, False),
        Variant("stock-pre", "fairseq transformer, Pre-LN (--encoder/decoder-normalize-before)", None, True),
    ]
    names = [n for n in SCHEMES if schemes is None or n in schemes]
    return stock + [Variant(n, f"residual_transformer --residual-scheme {n}", n) for n in names]


def model_args(size: Size) -> Dict:
    """The preset's widths, heads and dropout, with the size's depth, as flat options."""
    preset = Namespace()
    ARCH_CONFIG_REGISTRY[size.arch](preset)
    args = {k: v for k, v in vars(preset).items() if v is not None}
    if size.width is not None:
        embed, ffn, heads = size.width
        for side in ("encoder", "decoder"):
            args.update({f"{side}_embed_dim": embed, f"{side}_ffn_embed_dim": ffn, f"{side}_attention_heads": heads})
    args.update(
        encoder_layers=size.layers,
        decoder_layers=size.layers,
        share_all_embeddings=True,
        max_source_positions=max(size.src_len, size.gen_len) + 8,
        max_target_positions=max(size.tgt_len, size.gen_len) + 8,
    )
    return args


class SyntheticTask:
    """The dictionaries fairseq's build_model needs: ``vocab`` real symbols plus the specials."""

    def __init__(self, vocab: int):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for i in range(vocab):
            self.source_dictionary.add_symbol(f"w{i}")


def build_variant(variant: Variant, size: Size, task, seed: int = 0):
    args = model_args(size)
    torch.manual_seed(seed)
    if variant.scheme is None:
        args.update(
            arch="transformer",
            encoder_normalize_before=variant.normalize_before,
            decoder_normalize_before=variant.normalize_before,
        )
        return ARCH_MODEL_REGISTRY["transformer"].build_model(Namespace(**args), task)
    args.update(arch="residual_transformer", residual_scheme=variant.scheme)
    return ARCH_MODEL_REGISTRY["residual_transformer"].build_model(Namespace(**args), task)


def synthetic_batch(task, batch: int, src_len: int, tgt_len: int, seed: int = 0) -> Dict:
    """Real (non-special) tokens from a fixed generator; fixed lengths, no padding."""
    d = task.target_dictionary
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (batch, src_len), generator=g)
    target = torch.randint(d.nspecial, len(d), (batch, tgt_len), generator=g)
    src[:, -1] = target[:, -1] = d.eos()
    prev = torch.cat((target.new_full((batch, 1), d.eos()), target[:, :-1]), dim=1)
    return {
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.full((batch,), src_len, dtype=torch.long),
            "prev_output_tokens": prev,
        },
        "target": target,
        "ntokens": target.numel(),
    }


class TrainingStep:
    """forward + label-smoothed CE + backward + Adam step; gradients freed after the step."""

    def __init__(self, model, sample, padding_idx: int):
        self.model = model.train()
        self.sample = sample
        self.padding_idx = padding_idx
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))

    def loss(self):
        net_output = self.model(**self.sample["net_input"])
        lprobs = self.model.get_normalized_probs(net_output, log_probs=True)
        loss, _ = label_smoothed_nll_loss(
            lprobs.view(-1, lprobs.size(-1)),
            self.sample["target"].view(-1),
            LABEL_SMOOTHING,
            ignore_index=self.padding_idx,
        )
        return loss

    def __call__(self):
        self.loss().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def persistent_bytes(self) -> int:
        """Parameters and optimizer state: what the process holds between steps."""
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def saved_bytes(self) -> int:
        return saved_for_backward_bytes(self.loss, self.model.parameters())


def saved_for_backward_bytes(forward: Callable[[], torch.Tensor], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``forward`` runs.

    A storage counts once however many saved tensors view it, and whole (a saved view
    keeps all of its storage alive); storages of ``exclude`` (the parameters) do not count.
    """
    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    storages: Dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in excluded:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(storages.values())


class Generation:
    """Beam search over a fixed batch, every hypothesis exactly ``length`` tokens + EOS."""

    def __init__(self, model, task, sample, length: int, beam: int = BEAM):
        self.model = model.eval()
        self.sample = {"net_input": {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths")}}
        self.generator = SequenceGenerator(
            [model], task.target_dictionary, beam_size=beam, min_len=length, max_len_a=0, max_len_b=length
        )

    def __call__(self):
        return self.generator.generate([self.model], self.sample)


# -- measuring ------------------------------------------------------------------------


def _read_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.M).group(1))


def _release_free_memory():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def step_rss_rise_bytes(step: Callable[[], object]) -> Optional[int]:
    """Rise of the peak resident set size while ``step`` runs (Linux only, else None)."""
    _release_free_memory()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current VmRSS
        base = _read_status_kb("VmRSS")
    except OSError:
        return None
    step()
    return (_read_status_kb("VmHWM") - base) * 1024


def step_allocation_peak_bytes(step: Callable[[], object]) -> int:
    """Peak over ``step`` of the bytes of CPU tensors it allocated and had not yet freed."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    return max(itertools.accumulate((nbytes for _, nbytes in events), initial=0))


def memory_probe(size: Size, variant: Variant) -> Dict[str, float]:
    """Memory of one training step of ``variant`` (see the module docstring); MB."""
    task = SyntheticTask(size.vocab)
    sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, seed=0)
    step = TrainingStep(build_variant(variant, size, task), sample, task.target_dictionary.pad())
    step()  # Adam state exists from here on
    persistent = step.persistent_bytes()
    allocated = step_allocation_peak_bytes(step)
    rss = step_rss_rise_bytes(step)
    mb = 2**20
    return {
        "persistent_mb": persistent / mb,
        "step_peak_mb": allocated / mb,
        "peak_mb": (persistent + allocated) / mb,
        "rss_rise_mb": None if rss is None else rss / mb,
        "saved_mb": step.saved_bytes() / mb,
    }


def memory_probe_in_fresh_process(size: Size, variant: Variant, threads: int) -> Dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_residual_tools.bench",
            "memory",
            json.dumps(asdict(size)),
            json.dumps(asdict(variant)),
            str(threads),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    if out.returncode != 0:
        raise RuntimeError(f"memory probe of {variant.name} at {size.name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def interleaved(jobs: Dict[str, Callable[[], object]], warmup: int, reps: int) -> Dict[str, Dict[str, List[float]]]:
    """Run every job ``warmup`` times, then ``reps`` rounds of one run each, in a fixed order.

    Returns, per job and round: wall seconds, the process's user and system CPU seconds,
    and its minor page faults (memory the kernel had to map in: allocator churn shows up
    here and in system time, not in user time). The garbage collector runs between
    rounds, never inside a round (one full collection costs about 0.2 s here, with
    fairseq's and hydra's objects alive).
    """
    for _ in range(warmup):
        for job in jobs.values():
            job()
    times = {name: {"wall_s": [], "user_s": [], "sys_s": [], "minor_faults": []} for name in jobs}
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(reps):
            gc.collect()
            gc.disable()
            for name, job in jobs.items():
                usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                job()
                wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
                times[name]["wall_s"].append(wall)
                times[name]["user_s"].append(after.ru_utime - usage.ru_utime)
                times[name]["sys_s"].append(after.ru_stime - usage.ru_stime)
                times[name]["minor_faults"].append(after.ru_minflt - usage.ru_minflt)
            if gc_was_enabled:
                gc.enable()
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def ratio_summary(reference: Sequence[float], other: Sequence[float]) -> Dict[str, float]:
    """Speed of ``other`` relative to ``reference`` (reference seconds / other seconds)
    in each round, as min / median / max over the rounds."""
    ratios = [r / o for r, o in zip(reference, other)]
    return {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}


def speed_table(times: Dict[str, Dict[str, List[float]]], amount: float, unit: str) -> Dict[str, Dict]:
    """Per variant: the timings of ``interleaved``, ``amount`` per second of each run
    (under the key ``unit``), and the ratios to REFERENCE round by round."""
    return {
        name: {
            **t,
            unit: [amount / wall for wall in t["wall_s"]],
            "ratio_to_reference": ratio_summary(times[REFERENCE]["wall_s"], t["wall_s"]),
            "user_cpu_ratio_to_reference": ratio_summary(times[REFERENCE]["user_s"], t["user_s"]),
        }
        for name, t in times.items()
    }


def rotated(chosen: List[Variant], layout: int) -> List[Variant]:
    """``chosen`` starting at position ``layout``: the order models are built and run in."""
    k = layout % len(chosen)
    return chosen[k:] + chosen[:k]


def measure_size(
    size: Size,
    warmup: int,
    reps: int,
    fresh_process_memory: bool = True,
    log=print,
    gen_reps: Optional[int] = None,
    layout: int = 0,
    memory: bool = True,
) -> Dict:
    """Training and generation speed (``reps`` and ``gen_reps`` rounds; ``gen_reps`` defaults
    to ``reps``) and, if ``memory``, the memory of every variant at ``size``, in this process.

    ``layout`` rotates the order in which the models are built and run: where a model's
    weights and buffers land in memory depends on what was allocated before, and that
    alone moves one model's speed by a few percent (two instances of the same model differ
    so); ``pool_layouts`` combines several rotations.
    """
    gen_reps = reps if gen_reps is None else gen_reps
    task = SyntheticTask(size.vocab)
    pad = task.target_dictionary.pad()
    train_sample = synthetic_batch(task, size.batch, size.src_len, size.tgt_len, seed=0)
    gen_sample = synthetic_batch(task, size.gen_batch, size.src_len, size.gen_len, seed=1)
    chosen = variants(size.schemes)
    order = rotated(chosen, layout)
    models = {v.name: build_variant(v, size, task) for v in order}
    result = {
        "size": asdict(size),
        "model": model_args(size),
        "parameters": {v.name: sum(p.numel() for p in models[v.name].parameters()) for v in chosen},
        "variants": {v.name: v.label for v in chosen},
        "layouts": [[v.name for v in order]],
        "train_tokens": train_sample["ntokens"],
        # glibc malloc tunables change page-fault counts and speed (see interleaved)
        "malloc_environment": this_process_malloc_environment(),
    }

    log(f"[{size.name}] layout {layout + 1}: training, {len(chosen)} variants, warm-up {warmup}, {reps} rounds")
    steps = {n: TrainingStep(m, train_sample, pad) for n, m in models.items()}
    times = interleaved(steps, warmup=max(warmup, 1), reps=reps)  # >= 1: Adam state exists
    result["train"] = speed_table(times, train_sample["ntokens"], "tokens_per_s")
    del steps
    _release_free_memory()

    log(
        f"[{size.name}] layout {layout + 1}: generation, beam {BEAM}, {size.gen_batch} sentences x {size.gen_len} tokens, {gen_reps} rounds"
    )
    gens = {n: Generation(m, task, gen_sample, size.gen_len) for n, m in models.items()}
    lengths = {n: sorted({len(h["tokens"]) for hyps in g() for h in hyps}) for n, g in gens.items()}
    times = interleaved(gens, warmup=warmup, reps=gen_reps)
    result["generate"] = speed_table(times, size.gen_batch, "sentences_per_s")
    for name in gens:
        result["generate"][name]["hypothesis_lengths"] = lengths[name]
    del gens, models
    _release_free_memory()
    if not memory:
        return result

    log(
        f"[{size.name}] memory: one training step per variant"
        + (", each in a fresh process" if fresh_process_memory else "")
    )
    threads = torch.get_num_threads()
    memory = {
        v.name: memory_probe_in_fresh_process(size, v, threads) if fresh_process_memory else memory_probe(size, v)
        for v in chosen
    }
    for name, m in memory.items():
        for key in ("peak_mb", "rss_rise_mb", "saved_mb"):
            ref = memory[REFERENCE][key]
            m[f"{key}_ratio"] = None if ref is None or m[key] is None else m[key] / ref
    result["memory"] = memory
    return result


TIMING_KEYS = ("wall_s", "user_s", "sys_s", "minor_faults")


def pool_layouts(results: Sequence[Dict]) -> Dict:
    """One size's results from several layouts (``measure_size(layout=...)``) as one: the
    rounds of every layout side by side, ratios recomputed over all of them, the memory
    of whichever result measured it."""
    pooled = dict(results[0])
    pooled["layouts"] = [order for r in results for order in r["layouts"]]
    for table, amount, unit in (
        ("train", results[0]["train_tokens"], "tokens_per_s"),
        ("generate", results[0]["size"]["gen_batch"], "sentences_per_s"),
    ):
        times = {
            name: {key: [x for r in results for x in r[table][name][key]] for key in TIMING_KEYS}
            for name in results[0]["variants"]
        }
        pooled[table] = speed_table(times, amount, unit)
    for name in results[0]["variants"]:
        pooled["generate"][name]["hypothesis_lengths"] = results[0]["generate"][name]["hypothesis_lengths"]
    measured = [r["memory"] for r in results if "memory" in r]
    if measured:
        pooled["memory"] = measured[0]
    return pooled


# -- the record ---------------------------------------------------------------------------


def machine_info() -> Dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M).group(1)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/meminfo") as f:
            mem_gb = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) / 2**20
    except (OSError, AttributeError):
        mem_gb = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "kernel": platform.release(),
        "gpu": None,
    }


def versions() -> Dict:
    import fairseq

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairseq": fairseq.__version__,
        "threads": torch.get_num_threads(),
        "repository_commit": commit,
    }


def load_average() -> Optional[List[float]]:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def _size_from_json(text: str) -> Size:
    fields = json.loads(text)
    for key in ("width", "schemes"):
        if fields[key] is not None:
            fields[key] = tuple(fields[key])
    return Size(**fields)


def malloc_environment(setting: str, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` (default: this process's environment) with glibc's ``MALLOC_*`` variables
    replaced by those of ``setting`` (a key of MALLOC_SETTINGS)."""
    if setting not in MALLOC_SETTINGS:
        raise ValueError(f"unknown malloc setting {setting!r}; choose from {', '.join(MALLOC_SETTINGS)}")
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("MALLOC_")}
    return {**env, **MALLOC_SETTINGS[setting]}


def this_process_malloc_environment() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}


def measure_size_in_fresh_process(size: Size, threads: int, malloc: str = "keep", **measure) -> Dict:
    """``measure_size(size, **measure)`` in a process of its own: a size starts from a fresh allocator.

    glibc's malloc adapts its trim and mmap thresholds to what a process has allocated
    and freed before, so a size measured after others inherits their heap history, and
    how often a variant then pays page faults depends on the sizes that ran before it
    (one training job trains one model size). ``malloc`` picks the child's glibc malloc
    settings (MALLOC_SETTINGS); its memory probes inherit them. The child's progress
    lines go to stderr.
    """
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_residual_tools.bench",
            "size",
            json.dumps(asdict(size)),
            str(threads),
            json.dumps(measure),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(malloc_environment(malloc), PYTHONWARNINGS="ignore"),
    )
    if out.returncode != 0:
        raise RuntimeError(f"benchmark of size {size.name} failed (exit status {out.returncode}); its output is above")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(
    sizes: Sequence[Size],
    warmup: int,
    reps: int,
    threads: int,
    command: str,
    fresh_process_memory: bool = True,
    fresh_process_per_size: bool = True,
    malloc: str = "keep",
    log=print,
    gen_reps: Optional[int] = None,
    layouts: int = 1,
) -> Dict:
    """Measure ``sizes``, each in fresh processes with glibc malloc set to ``malloc``
    (MALLOC_SETTINGS), or all in this process, as it was started, if not ``fresh_process_per_size``.

    Each size is measured ``layouts`` times (``reps`` / ``gen_reps`` rounds each), with the
    order of its variants rotated (``measure_size``), and the rounds pooled (``pool_layouts``);
    memory is measured once.
    """
    torch.set_num_threads(threads)
    record = {
        "command": command,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(),
        "load_average_before": load_average(),
        "warmup": warmup,
        "rounds": reps,
        "generation_rounds": reps if gen_reps is None else gen_reps,
        "layouts": layouts,
        "fresh_process_per_size": fresh_process_per_size,
        "malloc": malloc if fresh_process_per_size else "this process",
        "reference": REFERENCE,
        "targets": TARGETS,
        "sizes": [],
    }
    started = time.perf_counter()
    for size in sizes:
        size_started, load_before = time.perf_counter(), load_average()
        results = []
        for layout in range(layouts):
            measure = dict(
                warmup=warmup,
                reps=reps,
                fresh_process_memory=fresh_process_memory,
                gen_reps=gen_reps,
                layout=layout,
                memory=layout == 0,
            )
            if fresh_process_per_size:
                log(f"[{size.name}] layout {layout + 1} of {layouts}, in a fresh process")
                results.append(measure_size_in_fresh_process(size, threads, malloc, **measure))
            else:
                results.append(measure_size(size, log=log, **measure))
        result = pool_layouts(results)
        # the machine may be shared: each size records how busy it was around it
        result.update(
            seconds=time.perf_counter() - size_started,
            load_average_before=load_before,
            load_average_after=load_average(),
        )
        record["sizes"].append(result)
    record["seconds"] = time.perf_counter() - started
    record["load_average_after"] = load_average()
    return record


def _fmt_ratio(r: Dict[str, float]) -> str:
    return f"{r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})"


def _fmt(x: Optional[float], spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _fmt_load(load: Optional[List[float]]) -> str:
    return "n/a" if load is None else " / ".join(f"{x:.2f}" for x in load)


def target_checks(record: Dict) -> List[Dict]:
    """Each target of issue 6 at each size: the measured median and whether it holds."""
    checks = []

    def check(size, what, value, target, holds):
        checks.append(dict(size=size, what=what, value=value, target=target, holds=bool(holds)))

    for size in record["sizes"]:
        name, train, gen, mem = size["size"]["name"], size["train"], size["generate"], size["memory"]
        if "residual" in train:
            speed = train["residual"]["ratio_to_reference"]["median"]
            check(
                name,
                "ResiDual training speed / stock Pre-LN",
                speed,
                f">= {TARGETS['residual_train']}",
                speed >= TARGETS["residual_train"],
            )
            peak = mem["residual"]["peak_mb_ratio"]
            check(
                name,
                "ResiDual peak training memory / stock Pre-LN",
                peak,
                f"<= {TARGETS['residual_memory']}",
                peak <= TARGETS["residual_memory"],
            )
            speed = gen["residual"]["ratio_to_reference"]["median"]
            check(
                name,
                "ResiDual generation speed / stock Pre-LN",
                speed,
                f">= {TARGETS['residual_generate']}",
                speed >= TARGETS["residual_generate"],
            )
        for ours, stock in (("post", "stock-post"), ("pre", "stock-pre")):
            if ours not in train:
                continue
            for kind, table in (("training", train), ("generation", gen)):
                ratio = ratio_summary(table[stock]["wall_s"], table[ours]["wall_s"])["median"]
                tolerance = TARGETS["plugin_vs_stock"]
                check(
                    name,
                    f"plugin {ours} {kind} speed / stock {ours}",
                    ratio,
                    f"1 ± {tolerance}",
                    abs(ratio - 1) <= tolerance,
                )
    return checks


def _fmt_rounds(record: Dict) -> str:
    layouts = record.get("layouts", 1)
    train, gen = record["rounds"], record.get("generation_rounds", record["rounds"])
    text = f"warm-up {record['warmup']}, interleaved rounds: {train} of training, {gen} of generation"
    if layouts > 1:
        text += (
            f", in each of {layouts} layouts (a fresh process per layout, the variants built and run in rotated order),"
            f" {layouts * train} and {layouts * gen} rounds in all"
        )
    return text


def _fmt_malloc(record: Dict) -> str:
    settings = {json.dumps(size.get("malloc_environment", {}), sort_keys=True) for size in record["sizes"]}
    if len(settings) != 1:
        return "settings differ between sizes (see bench.json)"
    env = json.loads(settings.pop())
    where = "each size's process" if record.get("fresh_process_per_size") else "this process"
    named = f" (`--malloc {record['malloc']}`)" if record.get("malloc") in MALLOC_SETTINGS else ""
    return (", ".join(f"{k}={x}" for k, x in env.items()) or "default settings") + f" in {where}{named}"


def _labels(record: Dict) -> Dict[str, str]:
    labels = {}
    for size in record["sizes"]:
        labels.update(size["variants"])
    return labels


def markdown(record: Dict) -> str:
    m, v = record["machine"], record["versions"]
    lines = [
        "# Benchmark: residual schemes vs fairseq's stock transformer",
        "",
        f"- date: {record['date']}",
        f"- machine: {m['cpu']}, {m['cores']} cores, {_fmt(m['memory_gb'], '.0f')} GB, Linux {m['kernel']}, no GPU",
        f"- versions: Python {v['python']}, torch {v['torch']}, fairseq {v['fairseq']}, {v['threads']} threads, commit {v['repository_commit']}",
        f"- command: `{record['command']}`; memory allocator: glibc malloc, " + _fmt_malloc(record),
        f"- {_fmt_rounds(record)}; {record['seconds']:.0f} s in all; "
        f"load average (1, 5, 15 min) before {_fmt_load(record['load_average_before'])}, after {_fmt_load(record['load_average_after'])}",
        f"- ratios are to `{record['reference']}`; speed: median (min–max) over the rounds, > 1 is faster "
        "(wall time; user CPU time beside it); memory: < 1 is smaller (definitions in `fairseq_residual_tools/bench.py`)",
        "- variants: " + "; ".join(f"`{n}` = {label}" for n, label in _labels(record).items()),
        "",
    ]
    for size in record["sizes"]:
        s = size["size"]
        lines += [
            f"## {s['name']}: `{s['arch']}`, E{s['layers']}D{s['layers']}, vocabulary {s['vocab']}",
            "",
            f"Training batch {s['batch']} sentences × {s['src_len']} source / {s['tgt_len']} target tokens; "
            f"generation {s['gen_batch']} sentences, beam {BEAM}, {s['gen_len']} tokens per hypothesis. "
            f"{size['seconds']:.0f} s; load average before {_fmt_load(size['load_average_before'])}, "
            f"after {_fmt_load(size['load_average_after'])}.",
            "",
            "| variant | params (M) | train tok/s | train speed | train speed, user CPU | page faults / step "
            "| generate sent/s | generate speed | generate speed, user CPU |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name in size["variants"]:
            t, g = size["train"][name], size["generate"][name]
            lines.append(
                f"| {name} | {size['parameters'][name] / 1e6:.1f} "
                f"| {statistics.median(t['tokens_per_s']):.0f} | {_fmt_ratio(t['ratio_to_reference'])} "
                f"| {_fmt_ratio(t['user_cpu_ratio_to_reference'])} | {statistics.median(t['minor_faults']):.0f} "
                f"| {statistics.median(g['sentences_per_s']):.2f} | {_fmt_ratio(g['ratio_to_reference'])} "
                f"| {_fmt_ratio(g['user_cpu_ratio_to_reference'])} |"
            )
        lines += [
            "",
            "| variant | peak MB | peak | RSS rise MB | RSS rise | saved for backward MB | saved |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in size["variants"]:
            mem = size["memory"][name]
            lines.append(
                f"| {name} | {mem['peak_mb']:.1f} | {mem['peak_mb_ratio']:.3f} "
                f"| {_fmt(mem['rss_rise_mb'], '.1f')} | {_fmt(mem['rss_rise_mb_ratio'], '.3f')} "
                f"| {mem['saved_mb']:.1f} | {mem['saved_mb_ratio']:.3f} |"
            )
        lines.append("")
    lines += ["## Targets (medians)", "", "| size | quantity | measured | target | holds |", "|---|---|---|---|---|"]
    for c in target_checks(record):
        lines.append(
            f"| {c['size']} | {c['what']} | {_fmt(c['value'], '.3f')} | {c['target']} | {'yes' if c['holds'] else 'no'} |"
        )
    lines.append("")
    return "\n".join(lines)


def write(record: Dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(record, indent=1) + "\n")
    (out_dir / "bench.md").write_text(markdown(record))


def command_line() -> str:
    return " ".join([Path(sys.executable).name] + sys.argv)


def _main(argv: Sequence[str]) -> None:
    """The child processes' entry points; each prints its result as one JSON line.

    ``python -m fairseq_residual_tools.bench memory SIZE_JSON VARIANT_JSON THREADS``: one memory probe;
    ``python -m fairseq_residual_tools.bench size SIZE_JSON THREADS MEASURE_JSON``: ``measure_size``.
    """
    import fairseq_residual  # noqa: F401  (registers the model and presets)

    what, size = argv[0], _size_from_json(argv[1])
    if what == "memory":
        torch.set_num_threads(int(argv[3]))
        result = memory_probe(size, Variant(**json.loads(argv[2])))
    elif what == "size":
        torch.set_num_threads(int(argv[2]))
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        result = measure_size(size, log=log, **json.loads(argv[3]))
    else:
        raise SystemExit(f"unknown entry point {what!r}: memory or size")
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
