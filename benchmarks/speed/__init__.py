"""Speed where users wait: training steps, decoding, tokenising, precision, kernels, the GPU session."""
