"""Signoff as the approver inside agent frameworks, each an optional extra.

`signoff.integrations.openai_agents` (extra `openai-agents`) and `signoff.integrations.langgraph`
(extra `langgraph`); importing this package imports neither framework.
"""
