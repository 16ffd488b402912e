"""Generated stubs of the Working Memory Service contract."""
