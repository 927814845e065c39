"""The web console under `/ui/`: each run's story, the approvals a signed-in person may decide, and
the step-up sign-in the riskiest rules ask for. Server-rendered HTML (Jinja templates, no script),
signed in with OpenID Connect; off (404) without `SIGNOFF_OIDC_*`.

`oidc` speaks to the issuer, `sessions` keeps who is signed in (signed cookies and CSRF tokens),
`pages` reads what each page shows, `app` routes the requests. Every decision goes through
`Runner.decide` and `Runner.edit`, as a Slack click does.
"""
