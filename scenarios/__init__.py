"""Signoff's scenario suite: real `signoff serve` processes against FakeSlack and a real database,
driven through crashes, replica races, database and Slack outages, model failures and hostile
input, with six invariants checked after every scenario. Run it with `python -m scenarios`.
"""
