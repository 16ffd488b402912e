"""Language-model providers for Phase 2 and the recovery chain around them."""
