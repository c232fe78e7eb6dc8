"""The schemes a study or probe compares: a registered residual scheme, or ResiDual with its output options.

residual                      --residual-scheme residual
residual:scale=0.5            --residual-scheme residual --residual-output-scale 0.5
residual:scale=0.5,alpha=2    ... --residual-output-scale 0.5 --residual-output-alpha 2
"""

from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigError

#: a variant's keys: the model options they set
OPTIONS = {"scale": "residual_output_scale", "alpha": "residual_output_alpha"}


def parse_variant(spec: str, option: str = "--schemes") -> Tuple[str, Dict[str, float]]:
    """``scheme`` or ``scheme:scale=C,alpha=A``: the scheme and the model options it sets (``option``: the
    command-line option that gave it, for the error)."""
    from fairseq_residual.schemes import SCHEMES

    scheme, _, rest = spec.partition(":")
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown scheme(s) {scheme}: {option} takes {', '.join(SCHEMES)}, or SCHEME:scale=C")
    options = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        number = _number(value)
        if key not in OPTIONS or number is None:
            raise ConfigError(f"{option} {spec!r}: write SCHEME or SCHEME:scale=C,alpha=A (e.g. residual:scale=0.5)")
        options[OPTIONS[key]] = number
    if options and not SCHEMES[scheme].dual_output:
        raise ConfigError(f"{option} {spec!r}: scale and alpha apply to ResiDual's output only")
    return scheme, options


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def check_variants(specs: Sequence[str], option: str = "--schemes") -> None:
    """Every spec parses, before any data is prepared or run is started."""
    for spec in specs:
        parse_variant(spec, option)


def variant_flags(spec: str) -> Tuple[str, List[str]]:
    """The scheme and the fairseq-train flags of its options."""
    scheme, options = parse_variant(spec)
    flags = [text for name, value in options.items() for text in (f"--{name.replace('_', '-')}", f"{value:g}")]
    return scheme, flags


def variant_name(spec: str) -> str:
    """The spec as a folder name: ``residual:scale=0.5`` is ``residual-scale0.5``."""
    return spec.replace(":", "-").replace(",", "-").replace("=", "")
