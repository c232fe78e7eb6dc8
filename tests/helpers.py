"""Helpers shared by the tests: tiny models built in-process, fairseq CLIs run as subprocesses,
the reproduction harness's shrunken cells. Fixtures live in conftest.py; tests import helpers
from here only (never from conftest or from another test file)."""

import contextlib
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import torch
from fairseq.data import Dictionary

import fairseq_residual  # noqa: F401  (registers the model)
from fairseq_residual.model import ResidualTransformerModel

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIR = str(ROOT / "fairseq_residual")


class TinyTask:
    """The two attributes fairseq's build_model needs from a translation task."""

    def __init__(self, vocab_size=40):
        d = Dictionary()
        for i in range(vocab_size):
            d.add_symbol(f"w{i}")
        self.source_dictionary = self.target_dictionary = d


def model_args(scheme="residual", layers=3, embed=16, heads=2, ffn=32, **overrides):
    args = dict(
        residual_scheme=scheme,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_embed_dim=embed,
        decoder_embed_dim=embed,
        encoder_ffn_embed_dim=ffn,
        decoder_ffn_embed_dim=ffn,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        share_all_embeddings=True,
    )
    args.update(overrides)
    return Namespace(**args)


def build_model(task=None, **kwargs):
    task = task or TinyTask()
    model = ResidualTransformerModel.build_model(model_args(**kwargs), task)
    return model.eval()


def stock_transformer(task, normalize_before, layers):
    """fairseq's own ``transformer`` (Post-LN, or Pre-LN with ``normalize_before``) at ``model_args``' sizes."""
    from fairseq.models.transformer import TransformerModel

    args = vars(model_args("post", layers=layers))
    args.pop("residual_scheme")
    args.update(
        arch="transformer",
        encoder_normalize_before=normalize_before,
        decoder_normalize_before=normalize_before,
    )
    return TransformerModel.build_model(Namespace(**args), task).eval()


def random_batch(task, batch=3, src_len=7, tgt_len=6, seed=0):
    """Source tokens left-padded (fairseq's default) with different lengths per row."""
    g = torch.Generator().manual_seed(seed)
    d = task.source_dictionary
    low, high = d.nspecial, len(d)
    src = torch.randint(low, high, (batch, src_len), generator=g)
    src_lengths = torch.tensor([src_len - (i % 3) for i in range(batch)])
    for i, n in enumerate(src_lengths.tolist()):
        src[i, : src_len - n] = d.pad()
        src[i, -1] = d.eos()
    prev = torch.randint(low, high, (batch, tgt_len), generator=g)
    prev[:, 0] = d.eos()
    prev[-1, -2:] = d.pad()  # right padding in the target side too
    return src, src_lengths, prev


def loss_of(model, batch, seed=1):
    """A training loss whose every logit matters: log-likelihood of the shifted targets; dropout seeded."""
    src, src_lengths, prev = batch
    torch.manual_seed(seed)
    logits = model(src, src_lengths, prev)[0]
    target = torch.roll(prev, -1, dims=1)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=1)


#: environment variables a forked run takes as a fresh process would; any other one in ``env`` means a fresh process
FORK_ENV = {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}
#: set to 1 to run every CLI of the tests as a fresh process (to tell a fork-only difference from a real one)
FRESH_VARIABLE = "FAIRSEQ_RESIDUAL_TEST_FRESH"


def run_cli(args, cwd, check=True, env=None, fresh=False):
    """Run a fairseq CLI (``python -m args...``) with the project's interpreter, as a fresh process or forked.

    Forked (the default): a child of this process, which has torch, fairseq and the plugin imported already, runs the
    module as ``__main__`` with a fresh root logger, the warnings a fresh process would show (none:
    PYTHONWARNINGS=ignore) and the given working folder and environment; it saves the 3-6 s of imports a fresh
    process spends. ``fresh=True`` or an ``env`` beyond thread counts: a new interpreter, for tests of what a command
    prints before the plugin loads (tests/plugin/test_quiet.py, the .pth's filters) or of what loading it sets up for
    the command (under fairseq-hydra-train: HYDRA_FULL_ERROR, which makes an error one line)."""
    full_env = dict(os.environ, PYTHONWARNINGS="ignore")
    full_env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    full_env.update(env or {})
    forked = not (fresh or set(env or ()) - FORK_ENV or os.environ.get(FRESH_VARIABLE))
    if forked:
        proc = _run_forked(list(map(str, args)), cwd, full_env)
    else:
        proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def _run_forked(args, cwd, env) -> subprocess.CompletedProcess:
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(args, cwd, env, out.fileno(), err.fileno())  # never returns
        _, status = os.waitpid(pid, 0)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
    return subprocess.CompletedProcess([sys.executable, "-m", *args], os.waitstatus_to_exitcode(status), *texts)


def _configures_logging_before_fairseq(module: str) -> bool:
    """Whether ``module``'s top-level ``logging.basicConfig`` comes before its first import of fairseq
    (fairseq_cli.train's does; generate's, eval_lm's, interactive's come after)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec(module)
    source = Path(spec.origin).read_text() if spec and spec.origin else ""
    configured = re.search(r"^logging\.basicConfig\(", source, flags=re.M)
    imported = re.search(r"^(from|import) fairseq", source, flags=re.M)
    return bool(configured and (imported is None or configured.start() < imported.start()))


def _forget_hydra():
    """Hydra's per-process singletons (the initialised config search path, the running job's config) as a fresh
    process has them: empty. Its ConfigStore keeps the schemas fairseq and the plugin register, as a fresh one would."""

    if "hydra" not in sys.modules:
        return
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.singleton import Singleton

    GlobalHydra.instance().clear()
    for name in [n for n in Singleton._instances if n.__name__ in ("HydraConfig", "JobRuntime")]:
        del Singleton._instances[name]


def _child(args, cwd, env, out_fd, err_fd):
    import io
    import logging
    import runpy
    import traceback
    import warnings

    code = 1
    try:
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), line_buffering=True, write_through=True)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        root = logging.getLogger()
        for handler in root.handlers[:]:  # pytest's: logging as a fresh process starts
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        if not _configures_logging_before_fairseq(args[0]):
            # what a fresh process's import of fairseq does (wav2vec2_classification), before the module's own
            # basicConfig, which then does nothing: fairseq-generate and -eval-lm log to stderr
            logging.basicConfig(level=logging.DEBUG)
        # --user-dir finds the plugin imported (by this process): the one line a fresh process would not log
        logging.getLogger("fairseq.utils").addFilter(lambda r: "has already been imported" not in str(r.msg))
        _forget_hydra()  # a fresh process has no hydra run yet: another test in this process may have had one
        warnings.resetwarnings()
        warnings.simplefilter("ignore")  # PYTHONWARNINGS=ignore, as run_cli gives a fresh process
        torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))
        sys.argv = [args[0], *args[1:]]
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException as e:
        try:
            sys.excepthook(type(e), e, e.__traceback__)  # the plugin's one-line errors, as in a fresh process
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def doc_commands(page: str):
    """The indented commands of ``docs/<page>`` (``fairseq-*`` and ``data-prep/*``), continuation lines joined:
    program -> its arguments, the first command of each program."""
    import re
    import shlex

    text = (ROOT / "docs" / page).read_text().replace("\\\n", " ")
    commands = {}
    for line in re.findall(r"^    ((?:fairseq-|data-prep/)\S+ .*)$", text, flags=re.M):
        program, *args = shlex.split(line)
        commands.setdefault(program, args)
    return commands


# fairseq-train on the demo data-bin, a model small enough for a few CPU seconds
TINY_MODEL = [
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
]


def generate_args(databin, checkpoint):
    """``fairseq-generate`` of the test split with the plugin: beam 5, BPE removed, on the CPU."""
    return ["fairseq_cli.generate", str(databin), "--user-dir", PLUGIN_DIR, "--path", str(checkpoint)] + [
        "--beam",
        "5",
        "--max-len-b",
        "20",
        "--remove-bpe",
        "--max-tokens",
        "2000",
        "--cpu",
    ]


def train_args(databin, save_dir, max_update, scheme="residual"):
    return [
        "fairseq_cli.train",
        str(databin),
        "--user-dir",
        PLUGIN_DIR,
        "--arch",
        "residual_transformer_iwslt_de_en",
        "--residual-scheme",
        scheme,
        *TINY_MODEL,
        "--share-all-embeddings",
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--max-tokens",
        "1024",
        "--max-update",
        str(max_update),
        "--cpu",
        "--num-workers",
        "0",
        "--save-dir",
        str(save_dir),
        "--save-interval-updates",
        "4",
        "--no-epoch-checkpoints",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        "--seed",
        "3",
    ]


# the schemes beyond Post-LN / Pre-LN / ResiDual, each checked against its paper's equations
BASELINES = [
    "deepnet",
    "b2t",
    "admin",
    "tfixup",
    "dlcl",
    "sandwich",
    "normformer",
    "residual-sandwich",
    "mix-ln",
    "ln-scaling",
    "keel",
    "siamese",
]
#: schemes whose LayerNorms (and NormFormer's head scales) are made random before an equation check: at init
#: all LNs are the identity and every gamma is 1, so a LayerNorm or head scale in the wrong place would not show
NORM_SCHEMES = {"sandwich", "normformer", "residual-sandwich", "mix-ln", "ln-scaling", "keel", "siamese"}


def randomise_learned_mixing(model, scheme, seed=0):
    """Random omega (Admin) / lower-triangular W (DLCL) / pseudo-queries and key gains (Attention Residuals, whose
    zero queries read the plain mean of the sources), to exercise their indexing."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if scheme == "admin" and name.endswith("_omega_delta"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            if scheme in NORM_SCHEMES and (name.endswith(".gamma") or "norm" in name or "attn_ln" in name):
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))
            if scheme == "attn-res" and "depth_attention" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=g))
            if scheme == "dlcl" and name.endswith("history_weight"):
                used = p.ne(0)  # the entries a layer reads: 1/(l+1) after initialisation
                p.copy_(torch.where(used, torch.rand(p.shape, generator=g) + 0.5, p))


def baseline_model(scheme, task, enc_layers=3, dec_layers=3, seed=0, batch=None, **kwargs):
    """A model in eval mode; Admin's omega profiled (on ``batch``) and randomised, DLCL's W randomised."""
    torch.manual_seed(seed)
    model = build_model(task, scheme=scheme, layers=enc_layers, decoder_layers=dec_layers, **kwargs)
    if scheme == "admin":
        src, src_lengths, prev = batch or random_batch(task, seed=seed)
        model.train()
        with torch.no_grad():
            model(src, src_lengths, prev)  # the profiling pass (dropout is 0 in these models)
        model.eval()
    randomise_learned_mixing(model, scheme, seed)
    return model


# the reproduction harness (tests/test_repro_*.py)
#: hydra overrides that shrink a paper cell to a few CPU seconds on the demo data-bin
#: (the tables mark such runs: they are not the paper's setting)
TINY = [
    "task.source_lang=src",
    "task.target_lang=tgt",
    "model.encoder_embed_dim=32",
    "model.decoder_embed_dim=32",
    "model.encoder_ffn_embed_dim=64",
    "model.decoder_ffn_embed_dim=64",
    "model.encoder_attention_heads=2",
    "model.decoder_attention_heads=2",
    "task.eval_bleu=false",
    "checkpoint.best_checkpoint_metric=loss",
    "checkpoint.maximize_best_checkpoint_metric=false",
    "common.log_interval=1",
    "dataset.num_workers=0",
]

SCRIPTS = ROOT / "scripts"


def launch_args(cell, work, data=None, **kwargs):
    """The namespace ``scripts/train.sh`` builds, for calling the launcher in-process."""
    values = dict(
        cell=cell,
        data=str(data) if data else None,
        work=str(work),
        results=str(work / "results"),
        gpus=1,
        nodes=1,
        launcher="auto",
        node_rank=None,
        master_addr=None,
        master_port=29500,
        cpu=False,
        max_tokens=None,
        update_freq=None,
        reference_gpus=None,
        dry_run=True,
        overrides=[],
    )
    values.update(kwargs)
    return Namespace(**values)


# language models (--arch residual_transformer_lm)
def lm_args(scheme="residual", layers=2, embed=16, heads=2, ffn=32, **overrides):
    """Every option of residual_transformer_lm at its default (the task's values given), a tiny size, no dropout."""
    import dataclasses

    from fairseq_residual.language_model import ResidualTransformerLanguageModelConfig

    args = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(ResidualTransformerLanguageModelConfig)
    }
    args.update(
        add_bos_token=False,
        tokens_per_sample=64,
        max_target_positions=64,
        tpu=False,
        residual_scheme=scheme,
        decoder_layers=layers,
        decoder_embed_dim=embed,
        decoder_input_dim=embed,
        decoder_output_dim=embed,
        decoder_ffn_embed_dim=ffn,
        decoder_attention_heads=heads,
        dropout=0.0,
    )
    args.update(overrides)
    return Namespace(**args)


def build_lm(task=None, seed=0, **kwargs):
    """A residual_transformer_lm in eval mode; Admin's omega profiled on a random batch, DLCL's W randomised."""
    from fairseq_residual.language_model import ResidualTransformerLanguageModel

    task = task or TinyTask()
    torch.manual_seed(seed)
    model = ResidualTransformerLanguageModel.build_model(lm_args(**kwargs), task)
    scheme = kwargs.get("scheme", "residual")
    if scheme == "admin":
        with torch.no_grad():
            model(lm_batch(task, seed=seed))  # the profiling pass (training mode, dropout 0)
    randomise_learned_mixing(model, scheme, seed)
    return model.eval()


def lm_batch(task, batch=3, length=9, seed=0):
    """Token ids of ``batch`` sequences, the last one right-padded (as fairseq's language_modeling batches)."""
    g = torch.Generator().manual_seed(seed)
    d = task.source_dictionary
    tokens = torch.randint(d.nspecial, len(d), (batch, length), generator=g)
    tokens[-1, -3:] = d.pad()
    return tokens


def commit_during_training(monkeypatch, study_module):
    """Make ``study_module``'s trainings stubs during which the checkout moves from commit a... (clean) to b...
    (with uncommitted changes), judged as diverged so that nothing is scored; returns the tree now checked out."""
    trees = iter([{"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}])
    now = {"tree": next(trees)}
    monkeypatch.setattr(study_module, "git_state", lambda: now["tree"])

    def train(cmd, log, name, on_line):
        now["tree"] = next(trees)
        log.write_text("")

    monkeypatch.setattr(study_module, "run_training", train)
    monkeypatch.setattr(study_module, "outcome", lambda log: {"fails": "diverged (NaN loss)"})
    return now


def fairscale_fsdp():
    """fairscale's FSDP module (imported when asked: fairscale is a test extra)."""
    import importlib

    return importlib.import_module("fairscale.nn.data_parallel.fully_sharded_data_parallel")


class HostStream:
    """What FSDP asks of a CUDA stream, for CPU work, which runs in program order."""

    def wait_stream(self, stream):
        pass

    def synchronize(self):
        pass


def cpu_stream_patches():
    """(object, attribute, replacement): CPU as FSDP's default compute device, the CUDA stream calls as no-ops."""
    stream = HostStream()
    setup_streams = fairscale_fsdp().FullyShardedDataParallel._setup_streams

    def setup_host_streams(fsdp):
        setup_streams(fsdp)  # creates none without CUDA; the wrapped layers share the root's dict
        if fsdp._is_root:
            fsdp._streams.update(dict.fromkeys(("fp32_to_fp16", "all_gather", "post_backward"), stream))

    return [
        (fairscale_fsdp(), "_get_default_cuda_device", lambda module: torch.device("cpu")),
        (fairscale_fsdp().FullyShardedDataParallel, "_setup_streams", setup_host_streams),
        (torch.cuda, "stream", lambda stream=None: contextlib.nullcontext()),
        (torch.cuda, "current_stream", lambda device=None: stream),
        (torch.cuda, "synchronize", lambda device=None: None),
        (torch.Tensor, "record_stream", lambda tensor, stream: None),
    ]


@contextlib.contextmanager
def gloo_world_of_one_in(folder):
    """One worker in a gloo process group, as a distributed fairseq-train launch with one worker has; afterwards
    the test process is as before: no group, fairseq's and fairscale's cached groups dropped, and the
    ``sys.excepthook`` that ``init_process_group`` replaces (it prefixes "[rank0]: " to every uncaught error,
    also in the CLI runs forked later from this process) restored."""
    import torch.distributed as dist
    from fairseq.distributed import utils as fairseq_distributed

    assert not dist.is_initialized(), "another test left a process group behind"
    hook = sys.excepthook
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=0, world_size=1)
    try:
        yield
    finally:
        for cached in (fairseq_distributed.get_global_group, fairscale_fsdp().get_process_group_cached):
            for attribute in ("_global_group", "_global_group_cache"):
                if hasattr(cached, attribute):
                    delattr(cached, attribute)
        dist.destroy_process_group()
        sys.excepthook = hook
