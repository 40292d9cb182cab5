"""The resnas dashboard: a read-only Streamlit app over `nas.store` (run it with `nas dashboard`).

`figures` holds the Plotly figures and tables (pure functions of store rows); `data` finds the
store (`--storage URL` after `--`, else $RESNAS_STORAGE, else resnas.db in the working directory)
and caches reads; `views` holds the pages and `app.py` is the script `streamlit run` executes.
"""

from .figures import (
    ancre_heatmap,
    hypervolume_figure,
    loss_curve_figure,
    nag_figure,
    pareto_figure,
    residual_norm_figure,
    searches_frame,
    skip_rate_figure,
    trials_frame,
    width_figure,
    width_trend,
)

__all__ = [
    "ancre_heatmap",
    "hypervolume_figure",
    "loss_curve_figure",
    "nag_figure",
    "pareto_figure",
    "residual_norm_figure",
    "searches_frame",
    "skip_rate_figure",
    "trials_frame",
    "width_figure",
    "width_trend",
]
