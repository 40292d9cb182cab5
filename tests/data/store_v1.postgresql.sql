CREATE TABLE resnas_schema_version (
	id INTEGER NOT NULL, 
	version INTEGER NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT ck_schema_version_single_row CHECK (id = 1)
);

CREATE TABLE resnas_searches (
	id SERIAL NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
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
	id SERIAL NOT NULL, 
	search_id INTEGER NOT NULL, 
	number INTEGER NOT NULL, 
	attempt INTEGER NOT NULL, 
	optuna_trial_number INTEGER, 
	status VARCHAR(16) NOT NULL, 
	failure_reason TEXT, 
	previous_attempts JSON NOT NULL, 
	config JSON NOT NULL, 
	started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	finished_at TIMESTAMP WITH TIME ZONE, 
	residual VARCHAR(32), 
	n_layers INTEGER, 
	d_model INTEGER, 
	n_heads INTEGER, 
	mod_rate DOUBLE PRECISION, 
	val_loss DOUBLE PRECISION, 
	val_bpb DOUBLE PRECISION, 
	nominal_flops_per_token DOUBLE PRECISION, 
	executed_flops_per_token DOUBLE PRECISION, 
	realised_flops_per_token DOUBLE PRECISION, 
	budget_flops DOUBLE PRECISION, 
	training_flops DOUBLE PRECISION, 
	tokens_seen BIGINT, 
	planned_tokens BIGINT, 
	steps INTEGER, 
	wall_time_s DOUBLE PRECISION, 
	tokens_per_s DOUBLE PRECISION, 
	step_time_share DOUBLE PRECISION, 
	peak_memory_mb DOUBLE PRECISION, 
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
	train_loss DOUBLE PRECISION, 
	val_loss DOUBLE PRECISION, 
	training_flops DOUBLE PRECISION NOT NULL, 
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
	mu_norm DOUBLE PRECISION, 
	d_par DOUBLE PRECISION, 
	d_2 DOUBLE PRECISION, 
	d_align DOUBLE PRECISION, 
	b_exact_8_8 DOUBLE PRECISION, 
	b_align_8_8 DOUBLE PRECISION, 
	p_hat_8_8 DOUBLE PRECISION, 
	PRIMARY KEY (trial_id), 
	FOREIGN KEY(trial_id) REFERENCES resnas_trials (id) ON DELETE CASCADE
);
