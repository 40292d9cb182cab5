"""The papers' claims measured here: depth, MoD and width sweeps, ANCRe, learning-rate transfer, perplexity through
the Hugging Face ecosystem."""
