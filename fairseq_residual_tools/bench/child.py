"""The process that ``isolation.in_fresh_process`` starts: ``python -m fairseq_residual_tools.bench.child FUNCTION
ARGUMENTS`` runs one benchmark function (its keyword arguments as JSON, ``threads`` among them) and prints its result
as its last line of JSON."""

import json
import sys
from typing import Callable, Dict

from .isolation import quiet_root_logger


def main(function: str, arguments: str) -> None:
    quiet_root_logger()  # before fairseq is imported
    import torch

    from .compiled import side_by_side
    from .fused_loss import side_by_side as fused_loss_side_by_side
    from .measure import measure_size
    from .memory import memory_probe
    from .variants import Size, Variant

    kwargs = json.loads(arguments)
    torch.set_num_threads(kwargs.pop("threads"))
    kwargs["size"] = Size(**kwargs["size"])  # every function takes one
    if "variant" in kwargs:
        kwargs["variant"] = Variant(**kwargs["variant"])
    functions: Dict[str, Callable[..., object]] = {
        "measure_size": measure_size,
        "memory_probe": memory_probe,
        "side_by_side": side_by_side,
        "fused_loss_side_by_side": fused_loss_side_by_side,
    }
    print(json.dumps(functions[function](**kwargs)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
