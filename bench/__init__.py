"""Benchmarks: per-step cost, peers, Slack acknowledgement latency and scale (`python -m bench`)."""
