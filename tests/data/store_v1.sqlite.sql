CREATE TABLE resnas_schema_version (
	id INTEGER NOT NULL, 
	version INTEGER NOT NULL, 
	updated_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT ck_schema_version_single_row CHECK (id = 1)
);

CREATE TABLE resnas_searches (
	id INTEGER NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	requested_trials INTEGER NOT NULL, 
	budget JSON NOT NULL, 
	space JSON NOT NULL, 
	settings JSON NOT NULL, 
	optuna_study_name VARCHAR(255), 
	code_version VARCHAR(255), 
	PRIMARY KEY (id), 
	CONSTRAINT ck_searches_status CHECK (status IN ('running', 'completed', 'interrupted', 'failed'))
);

CREATE UNIQUE INDEX ix_resnas_searches_name ON resnas_searches (name);

CREATE TABLE resnas_trials (
	id INTEGER NOT NULL, 
	search_id INTEGER NOT NULL, 
	number INTEGER NOT NULL, 
	attempt INTEGER NOT NULL, 
	optuna_trial_number INTEGER, 
	status VARCHAR(16) NOT NULL, 
	failure_reason TEXT, 
	previous_attempts JSON NOT NULL, 
	config JSON NOT NULL, 
	started_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	residual VARCHAR(32), 
	n_layers INTEGER, 
	d_model INTEGER, 
	n_heads INTEGER, 
	mod_rate DOUBLE, 
	val_loss DOUBLE, 
	val_bpb DOUBLE, 
	nominal_flops_per_token DOUBLE, 
	executed_flops_per_token DOUBLE, 
	realised_flops_per_token DOUBLE, 
	budget_flops DOUBLE, 
	training_flops DOUBLE, 
	tokens_seen BIGINT, 
	planned_tokens BIGINT, 
	steps INTEGER, 
	wall_time_s DOUBLE, 
	tokens_per_s DOUBLE, 
	step_time_share DOUBLE, 
	peak_memory_mb DOUBLE, 
	seed BIGINT, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_trials_search_number UNIQUE (search_id, number), 
	CONSTRAINT ck_trials_status CHECK (status IN ('running', 'completed', 'diverged', 'stopped', 'infeasible', 'failed')), 
	FOREIGN KEY(search_id) REFERENCES resnas_searches (id) ON DELETE CASCADE
);

CREATE INDEX ix_trials_search_status ON resnas_trials (search_id, status);

CREATE INDEX ix_resnas_trials_search_id ON resnas_trials (search_id);

CREATE TABLE resnas_trial_curve_points (
	trial_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	tokens BIGINT NOT NULL, 
	train_loss DOUBLE, 
	val_loss DOUBLE, 
	training_flops DOUBLE NOT NULL, 
	PRIMARY KEY (trial_id, step), 
	FOREIGN KEY(trial_id) REFERENCES resnas_trials (id) ON DELETE CASCADE
);

CREATE TABLE resnas_trial_diagnostics (
	trial_id INTEGER NOT NULL, 
	diagnostics JSON NOT NULL, 
	PRIMARY KEY (trial_id), 
	FOREIGN KEY(trial_id) REFERENCES resnas_trials (id) ON DELETE CASCADE
);

CREATE TABLE resnas_width_certificates (
	trial_id INTEGER NOT NULL, 
	n_sequences INTEGER NOT NULL, 
	d_model INTEGER NOT NULL, 
	mu_norm DOUBLE, 
	d_par DOUBLE, 
	d_2 DOUBLE, 
	d_align DOUBLE, 
	b_exact_8_8 DOUBLE, 
	b_align_8_8 DOUBLE, 
	p_hat_8_8 DOUBLE, 
	PRIMARY KEY (trial_id), 
	FOREIGN KEY(trial_id) REFERENCES resnas_trials (id) ON DELETE CASCADE
);
