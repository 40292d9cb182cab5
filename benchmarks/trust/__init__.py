"""How far to trust the answer: the fidelity benchmark, its grading apart from size, the replicas' bias, the anchors,
the knob effects, and the search layouts replayed on the tables."""
