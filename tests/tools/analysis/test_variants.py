"""The studies' and probes' scheme variants: a scheme, or ResiDual with its output options, as fairseq-train flags
and folder names; a bad one is a one-line error; the CPU and LM studies train them with those flags only."""

from pathlib import Path

import pytest
from fairseq import options

from fairseq_residual_tools.analysis import lm_study, study
from fairseq_residual_tools.analysis.variants import parse_variant, variant_flags, variant_name
from fairseq_residual_tools.errors import ConfigError


@pytest.mark.parametrize(
    "spec,scheme,model_options,flags,name",
    [
        ("pre", "pre", {}, [], "pre"),
        ("residual:scale=0.5", "residual", {"residual_output_scale": 0.5}, ["--residual-output-scale", "0.5"], None),
        (
            "residual-sandwich:scale=0.5,alpha=2",
            "residual-sandwich",
            {"residual_output_scale": 0.5, "residual_output_alpha": 2.0},
            ["--residual-output-scale", "0.5", "--residual-output-alpha", "2"],
            "residual-sandwich-scale0.5-alpha2",
        ),
    ],
)
def test_a_variant_is_a_scheme_its_model_options_flags_and_a_folder_name(spec, scheme, model_options, flags, name):
    assert parse_variant(spec) == (scheme, model_options)
    assert variant_flags(spec) == (scheme, flags)
    assert variant_name(spec) == (name or "residual-scale0.5")


@pytest.mark.parametrize(
    "spec,message",
    [
        ("nope", "^unknown scheme\\(s\\) nope: --variants takes post, pre, residual"),
        ("residual:gain=2", "^--variants 'residual:gain=2': write SCHEME or SCHEME:scale=C"),
        ("residual:scale", "^--variants 'residual:scale': write SCHEME"),
        ("residual:scale=x", "^--variants 'residual:scale=x': write SCHEME"),
        ("pre:scale=0.5", "^--variants 'pre:scale=0.5': scale and alpha apply to ResiDual's output only"),
    ],
)
def test_a_bad_variant_is_a_one_line_error(spec, message):
    with pytest.raises(ConfigError, match=message):
        parse_variant(spec, "--variants")


def parsed(cmd):
    return options.parse_args_and_arch(options.get_training_parser(), list(map(str, cmd[3:])))


def differing(a, b):
    return {k for k in vars(a) if getattr(a, k) != getattr(b, k, None)}


def test_the_cpu_study_trains_a_scaled_residual_with_the_flag_only():
    settings = study.parse_args([])
    plain, scaled = (study.RunSpec(s, 12, False, 1) for s in ("residual", "residual:scale=0.5"))
    args = [parsed(study.training_command(Path("DATA"), Path("SAVE"), spec, settings)) for spec in (plain, scaled)]
    assert args[1].residual_scheme == "residual" and args[1].residual_output_scale == 0.5
    assert differing(args[1], args[0]) == {"residual_output_scale"}
    assert scaled.name == "residual-scale0.5-e12d12-nowarmup-seed1"


def test_the_lm_study_trains_a_scaled_residual_with_the_flag_only_and_keys_it_apart():
    settings = lm_study.parse_args([])
    plain, scaled = lm_study.LMRun("residual", 6, 1), lm_study.LMRun("residual:scale=0.5", 6, 1)
    commands = [lm_study.training_command("DATA", "SAVE", run, settings) for run in (plain, scaled)]
    at = commands[1].index("--residual-output-scale")
    assert commands[1][at + 1] == "0.5" and commands[1][:at] + commands[1][at + 2 :] == commands[0]
    assert lm_study.run_key(plain, settings, "a" * 64, "fp") != lm_study.run_key(scaled, settings, "a" * 64, "fp")
    assert scaled.name == "residual-scale0.5-l6-seed1"


def test_the_lm_study_refuses_a_bad_variant_in_one_line(tmp_path, capsys):
    status = lm_study.main(["--schemes", "pre", "residual:scal=2", "--work", str(tmp_path), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    message = "error: --schemes 'residual:scal=2': write SCHEME or SCHEME:scale=C,alpha=A (e.g. residual:scale=0.5)"
    assert status == 1 and err == message + "\n"
    assert not any(tmp_path.iterdir())
