"""How a replica narrows its target: the width floor and what attention keeps (`workers.trial.replica`).

A value type, shared by the search's settings (`nas.space.budget`), the trial contract and the replica planner.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from search_spaces.residual_lm import ArchConfig

__all__ = ["DEFAULT_MIN_WIDTH", "DEFAULT_NARROWING", "KEEP_HEADS", "Keep", "Narrowing"]

DEFAULT_MIN_WIDTH = 8  # 2 heads of 4: the narrowest replica the default space's head counts allow
Keep = Literal["heads", "head_size"]


class Narrowing(BaseModel):
    """A replica is no narrower than `min_width`, nor than `min_share` of the target's width, and keeps either
    the target's head size (`head_size`: fewer heads of the target's size, attention scaled as at the target) or
    its head count (`heads`: the head size shrinks, the direction in which `completep`'s attention rule transfers).

    The default keeps the head size, no narrower than half the target: narrowing at a fixed head count halves the
    head size and doubles depth over width, and the replica's error against the target then grows with the
    target's ln(depth / width) (benchmarks/results/replica_bias.json). Keeping the head size, as muP's guidance
    does (Tensor Programs V, App. D.4), changes the shape least.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_width: int = Field(DEFAULT_MIN_WIDTH, ge=2, le=65536, description="narrowest replica width")
    min_share: float = Field(0.5, ge=0.0, le=1.0, description="narrowest replica as a share of the target's width")
    keep: Keep = Field("head_size", description="what attention keeps: the head size or the head count")

    def floor(self, target: ArchConfig) -> int:
        """The narrowest width a replica of `target` may have."""
        return max(self.min_width, math.ceil(self.min_share * target.d_model))

    def describe(self) -> str:
        """In a few words, e.g. `head size kept, no narrower than 0.5 d_T or 8`."""
        kept = "head size kept" if self.keep == "head_size" else "head count kept"
        floor = f"{self.min_share:g} d_T or {self.min_width}" if self.min_share > 0 else f"{self.min_width}"
        return f"{kept}, no narrower than {floor}"


DEFAULT_NARROWING = Narrowing()
# The head count kept, no floor but the narrowest width: replicas stay on the target's path down to width 8 (the
# `--narrowing heads --min-replica-share 0` of a search, the *_keep_heads tables of `make fidelity`).
KEEP_HEADS = Narrowing(min_share=0.0, keep="heads")
