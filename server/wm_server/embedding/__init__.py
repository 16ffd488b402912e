"""Recall by meaning: the embedder port, its providers and the fusion of the two rankings."""
