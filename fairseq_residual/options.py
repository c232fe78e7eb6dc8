"""The model options of ``--arch residual_transformer*`` with a preset's defaults, which ``fairseq-train --help`` omits.

    python -m fairseq_residual.options [--arch residual_transformer_iwslt_de_en]
    python -m fairseq_residual.options --arch residual_transformer_lm_gpt2_tiny    # the language model's

fairseq adds a model's options to its parser only after it has read ``--arch`` from the command line, and
``--help`` prints before that, for every architecture (its own ``transformer`` too). This prints them as fairseq
parses them, each with its help and the default the preset gives it; a flag on the command line always wins.
"""

import argparse
import dataclasses
from typing import List, Optional

from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY, MODEL_REGISTRY

from .language_model import MODEL as LANGUAGE_MODEL

MODEL = "residual_transformer"
ARCHS = sorted(arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model in (MODEL, LANGUAGE_MODEL))


def arch_defaults(arch: str) -> dict:
    """Every model option's value under ``--arch arch`` when the command line gives none."""
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)  # the preset, as fairseq applies it
    fields = dataclasses.fields(MODEL_DATACLASS_REGISTRY[ARCH_MODEL_NAME_REGISTRY[arch]])
    return {f.name: getattr(args, f.name, f.default) for f in fields if f.default is not dataclasses.MISSING}


def model_parser(arch: str) -> argparse.ArgumentParser:
    """The options fairseq adds for ``--arch arch`` (``add_args`` of the model, as ``fairseq-train`` calls it)."""
    task = " --task language_modeling" if ARCH_MODEL_NAME_REGISTRY[arch] == LANGUAGE_MODEL else ""
    parser = argparse.ArgumentParser(
        usage=f"fairseq-train DATA{task} --user-dir fairseq_residual --arch {arch} [OPTIONS below] [training options]",
        description=f"Model options of --arch {arch} (python -m fairseq_residual.options --arch {arch}).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        argument_default=argparse.SUPPRESS,
        add_help=False,
        allow_abbrev=False,
    )
    MODEL_REGISTRY[ARCH_MODEL_NAME_REGISTRY[arch]].add_args(parser)
    defaults = {name: _shown(value) for name, value in arch_defaults(arch).items()}
    parser.set_defaults(**{a.dest: defaults[a.dest] for a in parser._actions if a.dest in defaults})
    return parser


def _shown(default):
    """A default as a reader knows it: ``${model.decoder_embed_dim}`` (the value of another option) as the option."""
    if isinstance(default, str) and default.startswith("${model.") and default.endswith("}"):
        return "--" + default[len("${model.") : -1].replace("_", "-")
    return default


def main(argv: Optional[List[str]] = None) -> None:
    cli = argparse.ArgumentParser(prog="python -m fairseq_residual.options", description=__doc__.split("\n\n")[0])
    cli.add_argument("--arch", default=MODEL, choices=ARCHS, help="the preset whose defaults to show (%(default)s)")
    print(model_parser(cli.parse_args(argv).arch).format_help())


if __name__ == "__main__":
    main()
