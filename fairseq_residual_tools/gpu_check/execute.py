"""Running a part of the check: its runs at once (they share the GPU), each with a time limit, logged."""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..commands import RUN_ENV
from ..errors import UserError
from ..runner import run_logged
from .plan import Part, Run


def run_one(run: Run, logs: Path, timeout: Optional[float]) -> Dict:
    """``{"seconds": ...}`` and, if it failed, ``"error"``: its one line."""
    log = logs / run.log
    log.unlink(missing_ok=True)  # run_logged appends
    start = time.monotonic()
    try:
        run_logged(run.command, log, env=RUN_ENV, label=run.label, timeout=timeout)
        error = None
    except UserError as e:
        error = str(e)
    result: Dict = {"seconds": round(time.monotonic() - start, 1)}
    if error:
        result["error"] = error
    return result


def run_group(
    runs: List[Run], logs: Path, timeout: Optional[float], after: Optional[Callable[[Run, Dict], None]] = None
) -> Dict[str, Dict]:
    """Every run not skipped, all at once; ``after(run, result)`` as each finishes (in its thread)."""
    active = [r for r in runs if not r.skip]
    results: Dict[str, Dict] = {r.label: {"skipped": r.skip} for r in runs if r.skip}

    def work(run: Run):
        result = run_one(run, logs, timeout)
        if after is not None and "error" not in result:
            after(run, result)
        return run.label, result

    with ThreadPoolExecutor(max_workers=max(1, len(active))) as pool:
        for label, result in pool.map(work, active):
            results[label] = result
    return results


def run_part(part: Part, logs: Path, timeout: Optional[float]) -> Dict[str, Dict]:
    """The part's group; each run's follow-up (its scoring, ``results[label]["then"]``) as soon as the run has
    finished without error, while the others go on, within what is left of ``timeout`` (30 s at least)."""
    start = time.monotonic()
    follow = {r.label: r for r in part.then}

    def then(run: Run, result: Dict) -> None:
        if run.label in follow:
            left = None if timeout is None else max(30.0, timeout - (time.monotonic() - start))
            result["then"] = run_one(follow[run.label], logs, left)

    return run_group(part.runs, logs, timeout, after=then)
