"""A search run: Optuna proposes (`study`), Ray Tune runs the trials (`tune_runner`, `trainable`, `ray_env`),
each trial's rungs pass the store-backed rung gate (`rung_gate`), the store records every event, results it
cannot take wait on disk (`spool`), signals stop it cleanly (`interrupt`), and the front is measured again with
more seeds (`repeats`). `launch` creates, runs and resumes a search; `settings` says how it runs. The private
parts of Optuna and Ray Tune it touches are in `optuna_adapter` and `tune_adapter`.

Ray is imported only when a search really runs (`launch` sets its environment first)."""
