"""The approval API: programs outside Signoff ask for approvals over HTTP (`app.ApprovalApi`)."""
