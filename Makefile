# Two entry points for a fresh machine: `make demo` (install + main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo families test test-fast bench generation hf-perplexity precision proxy case-study claims service load search-efficiency fidelity effects ladder-efficiency replica-bias replica-wall index mod-published transfer tokenizers soak compile-cpu gpu-session-smoke gpu-session-prepare gpu-kernels reference-ops lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned, by pip: the CPU build on this machine (pip's configuration finds it); an unpinned
	# resolve may pull a multi-GB CUDA wheel.
	$(PY) -m pip install --quiet torch==2.13.0 "uv>=0.13,<1"
	# The rest by uv, which downloads and unpacks wheels in parallel where pip takes them one at a time; it keeps
	# the torch above, which satisfies the project's range. Compiled to bytecode at install, as pip does: where
	# PYTHONDONTWRITEBYTECODE is set, every process (each Ray worker, each `nas`) would compile its imports again.
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -e ".[dev,hf]"
	touch $@

install: $(STAMP)

# The main job: a real small search on the embedded defaults (shipped corpus, SQLite file resnas.db here, local
# Ray on 127.0.0.1, CPU) over the demo space (the default space's knobs at sizes its target can answer for),
# then its Pareto front at the target. Every config once at the top rung (the layout a 2-rung ladder at eta 2
# gets), the front's members again with a second seed (the noise a decision is judged against), and three configs
# at a quarter and a third of the top rung for the level at T: with 12 trials that is 15% of their compute, above
# the default share of 5%, so the demo asks for it (--level-share).
DEMO_NAME ?= demo-$(shell date +%Y%m%d-%H%M%S)
demo: $(STAMP)
	$(VENV)/bin/nas search --name $(DEMO_NAME) --trial-flops 5e10 --trials 12 --workers 2 --repeat-seeds 1 \
		--level-share 0.15 --space search_spaces/residual_lm/space_demo.yaml

families: $(STAMP)
	$(VENV)/bin/nas families

test: $(STAMP)
	$(PY) -m pytest

# Everything but the tests marked slow, postgres, cluster or browser, on both cores (pytest-xdist, one thread each;
# a worker idle at the end takes tests queued for the other).
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 --dist worksteal -m "not slow and not postgres and not cluster and not browser"

# Lint, format check and type check; mypy reads its files from [tool.mypy] in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m benchmarks.index --check

# benchmarks/README.md's table, regenerated from benchmarks/results/*.json
index: $(STAMP)
	$(PY) -m benchmarks.index --write

bench: $(STAMP)
	$(PY) -m benchmarks.speed.cpu_throughput --out benchmarks/results/cpu_throughput.json
	$(PY) -m benchmarks.speed.cpu_throughput --only families --out benchmarks/results/cpu_throughput.json
	$(PY) -m benchmarks.speed.cpu_throughput --threads 1 --out benchmarks/results/cpu_throughput_1thread.json

generation: $(STAMP)
	$(PY) -m benchmarks.speed.generation --out benchmarks/results/generation.json

hf-perplexity: $(STAMP)
	$(PY) -m benchmarks.claims.hf_perplexity --out benchmarks/results/hf_perplexity.json

precision: $(STAMP)
	$(PY) -m benchmarks.speed.precision --out benchmarks/results/precision.json

proxy: $(STAMP)
	$(PY) -m benchmarks.speed.proxy_trial --out benchmarks/results/proxy_trial.json

claims: $(STAMP)
	for sweep in depth mod width; do $(PY) -m benchmarks.claims.paper_claims $$sweep --out-dir benchmarks/results || exit 1; done

service: $(STAMP)
	$(PY) -m benchmarks.service.service_overhead --out benchmarks/results/service_overhead.json

# 500 no-op trials, 8 at a time, on PostgreSQL: LOAD_ADMIN_URL=postgresql://... uses a running server,
# otherwise a private one is started (and stopped) like the tests' (tests/postgres_server.py).
load: $(STAMP)
	$(PY) -m benchmarks.service.store_load --out benchmarks/results/store_load.json $(if $(LOAD_ADMIN_URL),--admin-url "$(LOAD_ADMIN_URL)")

# The fidelity benchmark on three corpora (the shipped plays, Python source, and the held-out handbook): fixed
# configs trained for real at T and on the top replica rung a search trains, two seeds each (the budget ladder on
# the first two), every config's anchor run at T/3 on the first two, every config's keep-heads replicas at T/90 ..
# T/10 (the level rungs' path, and the compute curve); then the error model's constants fitted corpus by corpus held
# out (results/forecast_constants.json; the shipped ones on all three) and the search replayed on each table with
# the constants of the other corpora. Builds only the rows its tables lack; `report` alone re-grades them.
fidelity: $(STAMP)
	for corpus in plays code; do \
		$(PY) -m benchmarks.trust.fidelity build --corpus $$corpus && \
		$(PY) -m benchmarks.trust.fidelity build-replicas --corpus $$corpus && \
		$(PY) -m benchmarks.trust.fidelity build-anchors --corpus $$corpus || exit 1; \
	done
	$(PY) -m benchmarks.trust.fidelity build --corpus handbook --kinds truth
	$(PY) -m benchmarks.trust.fidelity build-replicas --corpus handbook
	for corpus in plays code handbook; do \
		$(PY) -m benchmarks.trust.fidelity build-keep-heads --corpus $$corpus || exit 1; \
	done
	$(PY) -m benchmarks.trust.anchors --out benchmarks/results/anchors.json
	$(PY) -m benchmarks.trust.forecast_constants --write-shipped
	$(PY) -m benchmarks.trust.fidelity report --out benchmarks/results/fidelity.json \
		--dashboard-summary dashboard/fidelity_summary.json --compute-curve nas/answer/compute_curve.json

# Each knob's effect at T (nas effects) from the answer as a search runs it, graded against the same effects of
# the truth on the fidelity tables of every corpus (no training: the committed tables; a few minutes)
effects: $(STAMP)
	$(PY) -m benchmarks.trust.effects_grading --out benchmarks/results/effects.json

# A replica-ladder trial's wall time beside a budget-ladder trial's, at the search's default rungs
replica-wall: $(STAMP)
	$(PY) -m benchmarks.trust.replica_wall --out benchmarks/results/replica_wall.json

# Ladder vs single-budget vs target-budget search at equal total compute, replayed on the fidelity table
# What biases a replica's view of the architecture: each config's top replica rung under other narrowings, a
# learning-rate sweep at the replica's and the target's width, and an aspect-ratio correction read across corpora
# (reads make fidelity's tables and results/fidelity.json).
replica-bias: $(STAMP)
	for corpus in code plays; do \
		$(PY) -m benchmarks.trust.replica_bias build --corpus $$corpus && \
		$(PY) -m benchmarks.trust.replica_bias build-lr --corpus $$corpus || exit 1; \
	done
	$(PY) -m benchmarks.trust.replica_bias report --out benchmarks/results/replica_bias.json

ladder-efficiency: $(STAMP)
	$(PY) -m benchmarks.trust.ladder_efficiency --runs benchmarks/data/fidelity_runs.csv \
		--replica-runs benchmarks/data/fidelity_replica_runs_keep_heads.csv --out benchmarks/results/ladder_efficiency.json
	$(PY) -m benchmarks.trust.ladder_efficiency --runs benchmarks/data/fidelity_code_runs.csv \
		--replica-runs benchmarks/data/fidelity_code_replica_runs_keep_heads.csv --out benchmarks/results/ladder_efficiency_code.json

# Mixture-of-Depths as published (block routing, 0.875 on every other block) vs dense and per-sublayer 0.25,
# equal training compute, every family, two seeds
mod-published: $(STAMP)
	$(PY) -m benchmarks.claims.mod_published --out benchmarks/results/mod_published.json

# Learning-rate sweeps at widths 64-256 and depths 2-16, standard vs completep, every family, iso-FLOP, with
# the horizon check and the horizon rule's; builds only the rows its tables lack, `report` alone re-reads them
transfer: $(STAMP)
	$(PY) -m benchmarks.claims.transfer build --runs benchmarks/data/transfer_runs.csv
	$(PY) -m benchmarks.claims.transfer report --runs benchmarks/data/transfer_runs.csv --out benchmarks/results/transfer.json

# The same small search with bytes and with byte-level BPEs of 2k and 8k tokens, tokenisation speed, and
# the memory of trial processes reading a shard memory-mapped vs into private arrays
tokenizers: $(STAMP)
	$(PY) -m benchmarks.speed.tokenizers

# 200 no-op trials on a private PostgreSQL server with worker kills, a server restart, a driver SIGTERM and resume
soak: $(STAMP)
	$(PY) -m benchmarks.service.soak

# Every GPU question in one prepared session: run `bash benchmarks/speed/gpu_session.sh` on a lent GPU
gpu-session-smoke: $(STAMP)
	TRITON_INTERPRET=1 OMP_NUM_THREADS=1 $(PY) -m benchmarks.speed.gpu_session --smoke --out /tmp/gpu_session_smoke.json

gpu-session-prepare: $(STAMP)
	PYTHON=$(PY) bash benchmarks/speed/gpu_session.sh prepare

# torch.compile's saving on a CPU step against its compile time
compile-cpu: $(STAMP)
	$(PY) -m benchmarks.speed.compile_cpu --out benchmarks/results/compile_cpu.json

search-efficiency: $(STAMP)
	$(PY) -m benchmarks.trust.search_efficiency replay --out benchmarks/results/search_efficiency.json

case-study: $(STAMP)
	$(PY) -m benchmarks.claims.ancre_case_study --out-dir benchmarks/results

# Fused kernels on a CUDA machine: per-op Triton / eager / torch.compile, bandwidth, whole steps.
gpu-kernels: $(STAMP)
	$(PY) -m benchmarks.speed.gpu_kernels --out benchmarks/results/gpu_kernels.json

# On CPU: the share of each family's training step spent in the reference ops the kernels fuse.
reference-ops: $(STAMP)
	$(PY) -m benchmarks.speed.gpu_kernels --reference-only --device cpu --out benchmarks/results/reference_ops_cpu.json

clean:
	rm -rf $(VENV) .pytest_cache *.egg-info
