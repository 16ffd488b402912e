"""What the server tells its operators: logs, metrics, traces."""
