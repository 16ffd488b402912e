"""Memory-fidelity benchmark: does the working memory keep planted facts when the model misbehaves?

Scripted multi-day sessions (``scenario``) are replayed against scripted model behaviors
(``behaviors``) under three strategies (``strategies``): the real service with its guards, the
same ops applied without guards, and a full rewrite each commit. ``report`` turns the traces
into a Markdown table and plots; ``run`` is the entry point (``python -m bench.fidelity.run``).
"""
