"""Section ops: what they are, the tool schemas a model fills in, and reading whatever a model
or a client actually sent (malformed ops, broken tool arguments, creation output)."""
