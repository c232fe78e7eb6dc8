"""Training one cell: the batch kept at the paper's size, the launch command, resume, the log.

``train`` runs ``distributed_train`` once per GPU (directly, through torchrun, or srun in SLURM) and writes
``<work>/<cell name>/`` (checkpoints, ``train.log``, ``launch.json``, ``train.done``); the same command resumes
from ``checkpoint_last.pt`` there (docs/reproduce.md).
"""

import functools
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fairseq.dataclass.initialize import add_defaults, hydra_init
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

import fairseq_residual  # noqa: F401  (registers the model's options)
from fairseq_residual.finished_training import NOTHING_LEFT

from ..errors import ConfigError, DataError
from ..files import write_json, write_text
from ..folder_lock import held
from ..runner import PLUGIN_DIR, RunError, run_logged
from .cells import CONFIG_DIR, DATASETS, NOT_IMPLEMENTED, ROOT, Cell, Dataset, parse_cell
from .status import FAILS, LAUNCH_MARK, TRAINED, launch_records, training_state

ENTRY = "fairseq_residual_tools.repro.distributed_train"
#: smallest per-GPU batch the launcher chooses by itself: fairseq needs every
#: sentence (up to ~250 BPE tokens here) to fit one batch, and tiny batches waste GPUs
MIN_MAX_TOKENS = 1024


@dataclass(frozen=True)
class Batch:
    gpus: int  # processes in the job (GPUs x nodes)
    max_tokens: int  # per GPU and forward pass
    update_freq: int  # forward passes accumulated per update
    reference: str  # the paper's setting, in words
    reference_tokens: int  # the paper's effective batch

    @property
    def tokens(self) -> int:
        return self.gpus * self.max_tokens * self.update_freq

    def describe(self, cpu: bool = False) -> str:
        differs = "  WARNING: differs from the paper's effective batch" if self.tokens != self.reference_tokens else ""
        processes = f"{self.gpus} {'CPU process' if cpu else 'GPU'}{('es' if cpu else 's') if self.gpus > 1 else ''}"
        return (
            f"effective batch: {processes} x {self.max_tokens} max tokens "
            f"x update_freq {self.update_freq} = {self.tokens:,} tokens per update "
            f"(the paper's config: {self.reference} = {self.reference_tokens:,}){differs}"
        )


def derive_batch(
    gpus: int,
    ref_max_tokens: int,
    ref_update_freq: int,
    ref_gpus: int = 1,
    max_tokens: Optional[int] = None,
    update_freq: Optional[int] = None,
) -> Batch:
    """update_freq, then max_tokens (down to MIN_MAX_TOKENS), for ``gpus`` GPUs that keep the paper's
    batch of ref_gpus x ref_max_tokens x ref_update_freq tokens; giving both chooses another batch."""
    reference = (
        f"{ref_gpus} GPU{'s' if ref_gpus > 1 else ''} (assumed) x {ref_max_tokens} x update_freq {ref_update_freq}"
    )
    total = ref_gpus * ref_max_tokens * ref_update_freq
    if max_tokens is not None and update_freq is not None:
        return Batch(gpus, max_tokens, update_freq, reference, total)
    if update_freq is not None:
        if total % (gpus * update_freq):
            raise ConfigError(
                f"--update-freq {update_freq} on {gpus} GPUs cannot make the paper's batch of "
                f"{total:,} tokens; give --max-tokens too to choose another batch"
            )
        return Batch(gpus, total // (gpus * update_freq), update_freq, reference, total)
    candidates = [max_tokens] if max_tokens is not None else range(ref_max_tokens, MIN_MAX_TOKENS - 1, -1)
    for tokens in candidates:
        if total % (gpus * tokens) == 0:
            return Batch(gpus, tokens, total // (gpus * tokens), reference, total)
    if max_tokens is None and total < gpus * MIN_MAX_TOKENS:
        raise ConfigError(
            f"the paper's effective batch of {total:,} tokens over {gpus} GPUs would leave {total // gpus:,} tokens "
            f"per GPU, below the launcher's floor of {MIN_MAX_TOKENS} per GPU (every sentence must fit one batch, "
            f"and tiny batches waste GPUs): use at most {total // MIN_MAX_TOKENS} GPUs, or give --max-tokens and "
            "--update-freq to choose another batch"
        )
    raise ConfigError(
        f"the paper's effective batch of {total:,} tokens cannot be split evenly over {gpus} GPUs"
        + (f" with --max-tokens {max_tokens}" if max_tokens else f" with at least {MIN_MAX_TOKENS} tokens per GPU")
        + "; use a GPU count that divides it, or give --max-tokens and --update-freq to choose another batch"
    )


#: assumed vocabulary sizes (joint BPE merges / SentencePiece pieces of data-prep/)
VOCAB = {"iwslt14": 10_000, "wmt14": 40_000, "opus100": 64_000}
IWSLT_UPDATES = 80_000  # about 70 epochs of 160k pairs at 4096 tokens: an assumption
FP32_FLOPS = 6e12  # about 30% of an A100's 19.5 TFLOP/s fp32 peak
HALF_FLOPS = 60e12  # about 20% of an A100's 312 TFLOP/s fp16 tensor-core peak
VALIDATION_OVERHEAD = {"iwslt14": 1.5, "wmt14": 1.1, "opus100": 1.1}


def gpu_hours(cell: Cell, cfg, tokens: int) -> float:
    """Estimated GPU-hours of ``cell`` from its composed config at ``tokens`` per update (docs/reproduce.md).

    Training compute is 6 x weights x tokens (forward 2, backward 4 FLOPs per weight and token; attention
    scores add under 2% at these lengths and are left out), with per source token 4d^2 + 2 d f weights in each
    encoder layer, per target token 8d^2 + 2 d f in each decoder layer plus the output projection d x V.
    ``tokens`` is an upper bound (max_tokens counts padding).
    """
    d, ffn, vocab = int(cfg.model.encoder_embed_dim), int(cfg.model.encoder_ffn_embed_dim), VOCAB[cell.dataset]
    encoder = cell.encoder_layers * (4 * d * d + 2 * d * ffn)
    decoder = cell.decoder_layers * (8 * d * d + 2 * d * ffn) + d * vocab
    updates = int(cfg.optimization.max_update) or IWSLT_UPDATES
    flops = 6.0 * (encoder + decoder) * tokens * updates
    half = bool(cfg.common.amp or cfg.common.fp16 or cfg.common.memory_efficient_fp16)
    seconds = flops / (HALF_FLOPS if half else FP32_FLOPS) * VALIDATION_OVERHEAD[cell.dataset]
    return round(seconds / 3600, 1)


def compose(cell: Cell, overrides: Sequence[str] = ()):
    """The cell's full fairseq configuration, composed as fairseq-hydra-train does."""
    hydra_init(cell.dataset)
    with warnings.catch_warnings():
        # hydra's deprecation notes about fairseq's own config layout (schema matching, _group_)
        warnings.simplefilter("ignore", UserWarning)
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
            cfg = hydra_compose(cell.dataset, overrides=[*cell.overrides(), *overrides])
    add_defaults(cfg)
    return cfg


def multilingual_overrides(data: Path, dry_run: bool) -> List[str]:
    """task.lang_pairs / task.langs from the OPUS-100 data-bin (data-prep writes them)."""
    out = []
    for key, file in (("lang_pairs", "lang_pairs.txt"), ("langs", "langs.txt")):
        path = data / file
        if path.is_file():
            out.append(f"task.{key}='{path.read_text(encoding='utf-8').strip()}'")
        elif dry_run:
            out.append(f"task.{key}='<{path} (not there yet: data-prep/prepare-opus100.sh)>'")
        else:
            raise DataError(f"{path} not found: prepare OPUS-100 with data-prep/prepare-opus100.sh, or give --data")
    return out


def data_problem(dataset: Dataset, data: Path, cfg) -> Optional[str]:
    """Why ``data`` cannot serve the cell (missing, another language pair, separate dictionaries), or None."""
    if not data.is_dir():
        how = (
            f"make it with `bash data-prep/prepare-{dataset.name}.sh --out {data.parent}`"
            if data.name == "bin"
            else f"`bash data-prep/prepare-{dataset.name}.sh --out DIR` makes DIR/bin; give that as --data"
        )
        return f"data folder {data} does not exist yet: {how} (data-prep/README.md)"
    if cfg.task._name != "translation":
        return None
    src, tgt = cfg.task.source_lang, cfg.task.target_lang
    missing = [lang for lang in (src, tgt) if not (data / f"dict.{lang}.txt").is_file()]
    if missing:
        found = sorted(p.name[5:-4] for p in data.glob("dict.*.txt"))
        return (
            f"data folder {data} has no dict.{missing[0]}.txt: it is made for {'-'.join(found) or 'no language'}, "
            f"the cell trains {src}-{tgt}; give --data for that pair, or override task.source_lang= "
            "task.target_lang= after --"
        )
    joined = (data / f"dict.{src}.txt").read_bytes() == (data / f"dict.{tgt}.txt").read_bytes()
    if cfg.model.get("share_all_embeddings") and not joined:
        return (
            f"data folder {data} has separate {src} and {tgt} dictionaries, but the cell shares all embeddings: "
            "make a joined dictionary (every data-prep/ recipe does; fairseq-preprocess --joined-dictionary)"
        )
    return None


@dataclass
class LaunchPlan:
    cell: str
    cell_dir: str
    data: str
    launcher: str  # single, torchrun or srun
    gpus_per_node: int
    nodes: int
    cpu: bool
    batch: Dict[str, object]
    command: List[str]
    env: Dict[str, str]  # set for the command, on top of the environment
    deviations: List[str]  # how this launch departs from the paper's setting (shown next to its scores in the tables)
    notes: List[str]
    data_problem: Optional[str]  # why the data cannot serve the cell: a dry run says it, a launch stops

    def shell(self) -> str:
        prefix = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join(prefix + [shlex.quote(a) for a in self.command])


def slurm_master_addr(environ) -> str:
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        return "<first host of $SLURM_JOB_NODELIST: run inside the allocation>"
    hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return hosts.stdout.split()[0]


def plan_launch(args, environ=os.environ, entry_module: str = ENTRY) -> LaunchPlan:
    cell = parse_cell(args.cell)
    if not cell.implemented:
        raise ConfigError(f"{cell.name}: {NOT_IMPLEMENTED} ({cell.scheme!r} is not in fairseq_residual.schemes yet)")
    dataset = DATASETS[cell.dataset]
    data = Path(args.data or ROOT / dataset.data).resolve()
    cell_dir = Path(args.work).resolve() / cell.name
    extra = list(args.overrides)

    cfg = dataset_config(cell.dataset, tuple(extra))
    problem = data_problem(dataset, data, cfg)
    gpus_per_node = args.gpus or 1
    processes = gpus_per_node * args.nodes
    # the authors' GPU count is not published: 1 is assumed unless --reference-gpus says otherwise
    paper_batch = int(cfg.dataset.max_tokens), int(cfg.optimization.update_freq[0]), args.reference_gpus or 1
    batch = derive_batch(processes, *paper_batch, args.max_tokens, args.update_freq)
    hydra_args = [
        *("--config-dir", str(CONFIG_DIR), "--config-name", dataset.name, *cell.overrides(), f"task.data={data}"),
        *(multilingual_overrides(data, args.dry_run or bool(problem)) if dataset.name == "opus100" else []),
        *(f"common.user_dir={PLUGIN_DIR}", f"checkpoint.save_dir={cell_dir}", f"dataset.max_tokens={batch.max_tokens}"),
        *(f"optimization.update_freq=[{batch.update_freq}]", f"hydra.run.dir={cell_dir / 'hydra'}"),
        # JSON records in train.log (training_log reads them), curves for TensorBoard in the cell's folder
        *("common.log_format=json", f"common.tensorboard_logdir={cell_dir / 'tensorboard'}"),
        *(["common.cpu=true"] if args.cpu else []),
        *extra,
    ]
    launcher = args.launcher
    if launcher == "auto" and args.nodes > 1:
        launcher = "srun" if "SLURM_JOB_ID" in environ else "torchrun"
    elif launcher == "auto":
        launcher = "torchrun" if processes > 1 else "single"
    entry = ["-m", entry_module]
    env, notes = {}, []
    if launcher == "single":
        if processes > 1:
            raise ConfigError(f"--launcher single runs one process, not {processes}")
        command = [sys.executable, *entry, *hydra_args]
    elif launcher == "torchrun":
        rdzv = ["--standalone", "--nnodes=1"]
        if args.nodes > 1:
            if args.node_rank is None or not args.master_addr:
                raise ConfigError(
                    f"{args.nodes} nodes with torchrun: run train.sh on every node with --node-rank "
                    "(0..N-1) and --master-addr (the host of node 0), or launch inside SLURM (srun)"
                )
            rdzv = [f"--nnodes={args.nodes}", f"--node-rank={args.node_rank}"]
            rdzv += [f"--master-addr={args.master_addr}", f"--master-port={args.master_port}"]
        torchrun = [sys.executable, "-m", "torch.distributed.run", *rdzv, f"--nproc-per-node={gpus_per_node}"]
        command = [*torchrun, *entry, *hydra_args]
    else:  # srun
        env = {"MASTER_ADDR": args.master_addr or slurm_master_addr(environ), "MASTER_PORT": str(args.master_port)}
        srun = ["srun", f"--nodes={args.nodes}", f"--ntasks-per-node={gpus_per_node}", "--kill-on-bad-exit=1"]
        command = [*srun, sys.executable, *entry, "--ranks-from", "slurm", *hydra_args]
    if processes > 1 and args.cpu:
        notes.append(f"{processes} CPU processes, gloo backend")
    if not extra:
        notes.append(
            f"estimated training: ~{gpu_hours(cell, cfg, batch.tokens)} GPU-hours on A100-class GPUs at "
            f"{batch.tokens:,} tokens per update (an estimate: docs/reproduce.md)"
        )

    deviations = [f"overrides: {' '.join(extra)}"] if extra else []
    if args.cpu:
        deviations.append("trained on CPU")
    if batch.tokens != batch.reference_tokens:
        deviations.append(f"effective batch {batch.tokens:,} tokens instead of {batch.reference_tokens:,}")
    return LaunchPlan(
        cell=cell.name,
        cell_dir=str(cell_dir),
        data=str(data),
        launcher=launcher,
        gpus_per_node=gpus_per_node,
        nodes=args.nodes,
        cpu=args.cpu,
        batch={**asdict(batch), "tokens": batch.tokens, "text": batch.describe(args.cpu)},
        command=command,
        env=env,
        deviations=deviations,
        notes=notes,
        data_problem=problem,
    )


@functools.lru_cache(maxsize=None)
def dataset_config(dataset: str, extra: tuple = ()):
    """The dataset's config with ``extra`` (composing checks them). The batch and model width read from it
    do not depend on the scheme or the depth, so one composition serves all the dataset's cells."""
    # the data and OPUS-100's language lists need not exist to compose
    langs = ["task.lang_pairs=en-de", "task.langs=[de,en]"] if dataset == "opus100" else []
    return compose(Cell(dataset, "residual", 1, 1), ["task.data=/unused", *langs, *extra])


def write_launch_records(cell_dir: Path, records: list):
    """``launch.json``, replaced in one step (a kill leaves the old file or the new one, never half of one)."""
    write_json(cell_dir / "launch.json", records)


def _now(seconds: Optional[float] = None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def train(args, entry_module: str = ENTRY) -> int:
    plan = plan_launch(args, entry_module=entry_module)
    cell_dir = Path(plan.cell_dir)
    last = cell_dir / "checkpoint_last.pt"
    done = cell_dir / "train.done"
    if done.is_file():
        print(
            f"{plan.cell}: {NOTHING_LEFT}: {done.read_text(encoding='utf-8').strip()} ({done.name}); its checkpoints "
            f"are in {cell_dir}, scored by scripts/evaluate.sh --cell {plan.cell}; to train further, remove "
            f"{done.name} and raise optimization.max_update or max_epoch after --"
        )
        return 0
    print(
        f"cell {plan.cell}: {plan.launcher} launch, {plan.nodes} node(s) x {plan.gpus_per_node} "
        f"{'CPU process' if plan.cpu else 'GPU'}(s); folder {cell_dir}"
    )
    for line in [plan.batch["text"], *plan.notes, plan.data_problem]:
        if line:
            print(line)
    if last.is_file():
        before = training_state(cell_dir)
        print(
            f"resuming from {last} (fairseq restores model, optimizer, schedule and data position); "
            f"state so far: {before.describe()}{': ' + before.detail if before.detail else ''}"
        )
    else:
        print("no checkpoint_last.pt yet: training from the start")
    print(plan.shell())
    print(f"curves: tensorboard --logdir {cell_dir / 'tensorboard'}")
    if args.dry_run:
        return 0
    if plan.data_problem:
        raise DataError(plan.data_problem)

    with launch_lock(cell_dir, args.node_rank):
        return _launch(plan, cell_dir)


def launch_lock(cell_dir: Path, node_rank: Optional[int] = None):
    """Held by the launcher while its training runs (``launch.lock`` in the cell folder; one per node when torchrun
    spans several): a second launch of the cell refuses (``folder_lock.held``)."""
    path = cell_dir / ("launch.lock" if node_rank is None else f"launch.node{node_rank}.lock")
    return held(cell_dir, path, "launch")


def _launch(plan: LaunchPlan, cell_dir: Path) -> int:
    last = cell_dir / "checkpoint_last.pt"
    done = cell_dir / "train.done"
    log_path = cell_dir / "train.log"
    started = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"{LAUNCH_MARK}{_now(started)} launch: {plan.shell()}\n")
    # "returncode" stays None until the launch ends: a record left so is a launch killed with its launcher
    record = {**asdict(plan), "shell": plan.shell(), "returncode": None, "started": _now(started)}
    earlier = launch_records(cell_dir)
    write_launch_records(cell_dir, [*earlier, record])
    try:  # the console shows the training's output as it goes
        run_logged(plan.command, log_path, env=plan.env, label=plan.cell, on_line=sys.stdout.write)
        rc, stopped_by = 0, None
    except RunError as stopped:  # a stop signal or failure; the log and the state below say which
        rc, stopped_by = stopped.returncode, stopped.signal
    record.update(returncode=rc, signal=stopped_by, wall_seconds=round(time.time() - started, 1))
    write_launch_records(cell_dir, [*earlier, record])
    state = training_state(cell_dir)
    if state.name == TRAINED:
        write_text(done, f"fairseq-hydra-train finished ({state.detail}) at {_now()}\n")
        return 0
    if state.name == FAILS:
        print(f'{plan.cell}: training diverged: {state.detail} -- the tables report it as "fails"')
    elif stopped_by or rc < 0:
        print(f"{plan.cell}: {state.detail}; the same command resumes it from {last}")
    else:
        print(f"{plan.cell}: training {state.describe()}: {state.detail}; see {log_path}")
    if stopped_by:
        return 128 + signal.Signals[stopped_by].value
    return rc if rc > 0 else 128 - rc if rc < 0 else 1
