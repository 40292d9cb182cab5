"""The search service: the command line (`cli/`), a search run (`search/`: Optuna + Ray Tune, the rung gate,
signals, spooling), the answer at the target (`answer/`), what a search is asked (`space/`: the space and the
budget), the store (`store/`) and the export (`export.py`)."""
