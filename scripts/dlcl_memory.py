#!/usr/bin/env python
"""Peak training memory of DLCL relative to Pre-LN, one training step of each in a fresh process.

    python scripts/dlcl_memory.py --out results/dlcl-memory/after.json     # WMT E18D18

The probe is the benchmark's (``fairseq_residual_tools/bench/memory.py``): parameters + Adam state +
the peak of live tensor bytes during one step, the rise of the process's peak resident memory,
and the bytes autograd saves for backward; both models at the size's widths and batch.
"""

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import repo_venv

repo_venv.use()
import fairseq_residual  # noqa: E402
from fairseq_residual_tools.bench.isolation import in_fresh_process  # noqa: E402
from fairseq_residual_tools.bench.variants import SIZES, variants  # noqa: E402
from fairseq_residual_tools.provenance import provenance  # noqa: E402

SCHEMES = ("pre", "dlcl")
MEASURES = ("peak_mb", "rss_rise_mb", "saved_mb")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="wmt-e18d18", choices=list(SIZES), help="model size and batch")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of each measuring process")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    plugin = [v for v in variants(SCHEMES) if v.scheme]  # not fairseq's stock transformers
    memory = {v.name: in_fresh_process("memory_probe", args.threads, size=size, variant=v) for v in plugin}
    ratio = {key: memory["dlcl"][key] / memory["pre"][key] for key in MEASURES if memory["pre"][key]}
    record = {
        "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
        "plugin": str(Path(fairseq_residual.__file__).parent),
        "size": asdict(size),
        "threads": args.threads,
        "memory": memory,
        "dlcl_over_pre": ratio,
        "provenance": provenance(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{args.size}: DLCL / Pre-LN " + ", ".join(f"{k} {v:.3f}" for k, v in ratio.items()))


if __name__ == "__main__":
    main()
