"""The demo's settings: ``configs/demo.yaml``, with ``--set KEY=VALUE`` overrides.

The file is the one place the demo's corpus, models and budgets are written down; the
runner, ``make demo`` and the README's figures all come from it. A run's folder name
carries a hash of the settings it depends on, so a changed value trains anew while an
unchanged one finds its finished training again.
"""

import hashlib
import json
from pathlib import Path
from typing import Dict, List

import yaml

from ..errors import ConfigError

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
DEPTH_KEYS = {"layers", "dim", "lr", "warmup", "max_tokens", "max_update", "validate_every"}
#: a depth may also set ``warmup_init_lr`` (= ``lr``: no warmup, as in the paper's warmup ablation)
OPTIONAL_DEPTH_KEYS = {"warmup_init_lr"}


def load_settings(path=DEFAULT_CONFIG, overrides: List[str] = ()) -> Dict:
    """The YAML file as a dict, each ``a.b=value`` override applied (value parsed as YAML).

    A number picks a list item: ``depths.1.max_update=200`` is the second depth's budget.
    """
    settings = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r} is not KEY=VALUE; write e.g. --set corpus.train=300")
        node, parts = settings, [int(p) if p.isdigit() else p for p in key.split(".")]
        for part in parts[:-1]:
            node = _child(node, part, key, path)
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"--set {key}: {part!r} is not a section of {path}; see the file for the keys")
        _child(node, parts[-1], key, path)
        node[parts[-1]] = yaml.safe_load(value)
    for depth in settings["depths"]:
        missing, unknown = DEPTH_KEYS - set(depth), set(depth) - DEPTH_KEYS - OPTIONAL_DEPTH_KEYS
        if missing or unknown:
            keys = ", ".join(sorted(DEPTH_KEYS | OPTIONAL_DEPTH_KEYS))
            raise ConfigError(
                f"{path}: a depth setting lacks {', '.join(sorted(missing)) or 'nothing'} and has unknown keys "
                f"{', '.join(sorted(unknown)) or 'none'}; its keys are {keys}"
            )
    return settings


def _child(node, part, key, path):
    try:
        return node[part]
    except (KeyError, IndexError, TypeError):
        raise ConfigError(f"--set {key}: no setting {part!r} there in {path}; see the file for the keys") from None


def digest(*parts) -> str:
    """A short stable hash of JSON-serialisable settings."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8]


def data_key(settings: Dict) -> str:
    return digest(settings["seed"], settings["corpus"])


def run_name(settings: Dict, scheme: str, depth: Dict) -> str:
    """``post-e12d12-<hash>``: the folder of one training, named by everything it depends on."""
    key = digest(settings["seed"], settings["corpus"], depth, settings["log_points"], scheme)
    return f"{scheme}-e{depth['layers']}d{depth['layers']}-{key}"
