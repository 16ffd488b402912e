"""Sizes: the token estimate, the reference thresholds, and the size reminders for the model."""
