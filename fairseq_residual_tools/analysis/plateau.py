"""When a training has reached its end: the plateau criterion of the translation study (``bible_study``).

A run has plateaued at validation update U (U at least ``min_updates``) when its best validation loss improved by
less than ``fraction`` (1 %) over the last quarter of the run:

    best(U * 3/4) - best(U) < fraction * best(U * 3/4),     best(u) = min of the validation losses at updates <= u

The window grows with the run, so a run that still gains 1 % over its last quarter keeps training, and one whose
validation loss has turned up (over-fitting) stops once its best is a quarter of the run old. The first update at
which the criterion holds is the run's end; the study trains one validation interval at a time and stops there.
"""

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

Curve = Sequence[Tuple[int, float]]  # (update, validation loss), in update order


def best_until(curve: Curve, update: float) -> Optional[float]:
    losses = [loss for u, loss in curve if u <= update]
    return min(losses) if losses else None


@dataclass(frozen=True)
class Plateau:
    fraction: float = 0.01
    window: float = 0.25  # the last quarter of the run
    min_updates: int = 2000

    def holds_at(self, curve: Curve, update: int) -> bool:
        """Whether the run has plateaued at ``update`` (one of its validation points)."""
        if update < self.min_updates:
            return False
        before, now = best_until(curve, update * (1 - self.window)), best_until(curve, update)
        return before is not None and now is not None and before - now < self.fraction * before

    def reached(self, curve: Curve) -> Optional[int]:
        """The first validation update at which the run has plateaued, or None."""
        return next((u for u, _ in curve if self.holds_at(curve, u)), None)

    def describe(self) -> str:
        return (
            f"the best validation loss improved by less than {self.fraction:.0%} over the last "
            f"{self.window:.0%} of the run's updates (checked at every validation from update {self.min_updates} on)"
        )
