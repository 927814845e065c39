"""Operating Signoff: logs, metrics and traces, each an `Observer` of one stream (what each commit
wrote), composed in `observers.py`; `logs.py` also configures logging for the whole process.

Nothing here is consulted by a run: an observer that fails is logged and the run goes on.
Prometheus and OpenTelemetry are imported only by the modules that use them, so the CLI, which
configures logging through `logs.py`, loads neither.
"""
