"""The resnas dashboard: a read-only Streamlit app over `nas.store` (run it with `nas dashboard`).

The figures and tables are pure functions of store rows: `front_figures` the Pareto fronts, cost ratios
and hypervolume, `target_figures` the predictions at the target budget, `trial_figures` one trial's
diagnostics and the width certificate, `tables` the DataFrames, and `style` the encodings and hover texts
they share. `cost` holds the fronts' x-axes, counted FLOPs or measured seconds per token, and their ratio
per config; `reads` finds the store (`--storage URL` after `--`, else $RESNAS_STORAGE, else resnas.db in
the working directory) and caches reads; `views` names the pages (`search_pages`, `trial_pages`, sharing
`widgets`) and `app.py` is the script `streamlit run` executes.
"""

from .cost import AXES, COUNTED, MEASURED, CostAxis, cost_ratios, seconds_per_token
from .front_figures import cost_ratio_figure, hypervolume_figure, pareto_figure
from .tables import searches_frame, trials_frame
from .trial_figures import (
    ancre_heatmap,
    loss_curve_figure,
    nag_figure,
    residual_norm_figure,
    skip_rate_figure,
    width_figure,
)

__all__ = [
    "AXES",
    "COUNTED",
    "MEASURED",
    "CostAxis",
    "ancre_heatmap",
    "cost_ratio_figure",
    "cost_ratios",
    "hypervolume_figure",
    "loss_curve_figure",
    "nag_figure",
    "pareto_figure",
    "residual_norm_figure",
    "searches_frame",
    "seconds_per_token",
    "skip_rate_figure",
    "trials_frame",
    "width_figure",
]
