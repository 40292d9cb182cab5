"""The pretrained model in the Hugging Face ecosystem: a run as a model folder that loads without this project
(`convert`), generation from it (`generate`) and its perplexity by lm-evaluation-harness (`evaluate`). Needs the
`hf` extra; every module checks it with one line."""
