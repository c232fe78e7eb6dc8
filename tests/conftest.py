"""Shared test helpers: tiny models built in-process and one prepared data-bin per session."""

import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
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


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and then a busy machine cannot oversubscribe them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_cli(args, cwd, check=True, env=None):
    """Run a fairseq CLI as a subprocess with the project's interpreter."""
    full_env = dict(os.environ, PYTHONWARNINGS="ignore")
    full_env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


@pytest.fixture(scope="session")
def demo_databin(tmp_path_factory):
    """A small data-bin from the embedded synthetic corpus, built by the real pipeline."""
    from fairseq_residual_tools.demo.prepare import prepare_demo_data

    work = tmp_path_factory.mktemp("demo-data")
    return prepare_demo_data(work, train=800, valid=40, test=40, bpe_merges=400)
