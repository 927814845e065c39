"""The approval API's OpenAPI 3.1 document, served at `/v1/openapi.json`. The request bodies'
schemas are the pydantic models the API checks bodies with, so the document cannot drift from them."""

from __future__ import annotations

from typing import Any, get_args

from signoff.bot.api.requests import MAX_WAIT_S, CreateApproval, Outcome
from signoff.runtime.caller_status import CallerStatus

_STATUSES = list(get_args(CallerStatus))

_APPROVAL = {
    "type": "object", "required": ["id", "status", "args"],
    "properties": {
        "id": {"type": "string", "description": "The approval's id (its run's)."},
        "status": {"type": "string", "enum": _STATUSES},
        "args": {"type": "object", "description": "The arguments to run with: as approved, maybe edited."},
        "decided_by": {"type": "string", "description": "A Slack user id, policy:<rule> or grant:<id>."},
        "reason": {"type": "string"},
        "expires_at": {"type": "string", "format": "date-time"},
        "digest": {"type": "string", "description": "What the approval is bound to: tool, arguments, key, preview."},
        "receipt": {
            "type": "object", "required": ["receipt", "signature"],
            "description": "The decision's signed receipt (Ed25519), once it is decided and a signing key is "
                           "configured; a call a rule or a grant let run unasked has one once it starts. Check it "
                           "with signoff.client.verify_receipt against the public key `signoff receipts public-key` "
                           "prints.",
            "properties": {
                "receipt": {"type": "object", "description": "The signed fields: approval_id, run_id, requester, "
                                                            "key, tool, digest, arguments_digest, preview_digest, "
                                                            "policy_digest, rule, grant_id, decision, decided_by, "
                                                            "decided_at, start_by, step_up, format, key_id."},
                "signature": {"type": "string", "description": "Base64 Ed25519 signature of the fields' "
                                                               "canonical JSON."},
            },
        },
    },
}
_ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string", "description": "Stable: unauthorized, forbidden, not_found, invalid_request, "
                                                  "invalid_json, invalid_body, idempotency_conflict, not_startable, "
                                                  "not_started, too_late, rate_limited, method_not_allowed, "
                                                  "internal."},
        "message": {"type": "string"},
        "status": {"type": "string", "description": "The approval's status, on a 409."}}}},
}


def _answer(description: str, schema: str = "Approval") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _refusals(*statuses: int) -> dict[str, Any]:
    return {str(status): _answer("Refused; see `error.code`.", "Error") for status in statuses}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Signoff approval API", "version": "1",
             "description": "Ask a person in Slack to approve a call your program will make; wait for the decision; "
                            "start the approved call exactly once; report what came of it."},
    "security": [{"bearer": []}],
    "paths": {
        "/v1/approvals": {"get": {
            "summary": "The approval this key asked for under an idempotency key",
            "parameters": [{"name": "key", "in": "query", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _answer("The approval."), **_refusals(400, 401, 404, 429)}}, "post": {
            "summary": "Ask for an approval (the same `key` again answers with the same approval)",
            "requestBody": _body("CreateApproval"),
            "responses": {"201": _answer("Asked: pending, or decided at once by the policy."),
                          "200": _answer("The approval this key made before."), **_refusals(400, 401, 403, 409, 413, 429)}}},
        "/v1/approvals/{id}": {"get": {
            "summary": "The approval; with `wait`, held until it is decided or `wait` seconds pass",
            "parameters": [_ID, {"name": "wait", "in": "query", "schema": {"type": "integer", "minimum": 0,
                                                                            "maximum": MAX_WAIT_S}}],
            "responses": {"200": _answer("The approval."), **_refusals(401, 404, 429)}}},
        "/v1/approvals/{id}/start": {"post": {
            "summary": "Start the approved call: once; the answer holds the arguments and key to run it with",
            "parameters": [_ID],
            "responses": {"200": _answer("Started: run it now, once."), **_refusals(401, 404, 409, 429)}}},
        "/v1/approvals/{id}/outcome": {"post": {
            "summary": "Report what came of the started call (once)",
            "parameters": [_ID], "requestBody": _body("Outcome"),
            "responses": {"200": _answer("Recorded: succeeded or failed."), **_refusals(400, 401, 404, 409, 429)}}},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                       "description": "A key from `signoff keys create`."}},
        "schemas": {"Approval": _APPROVAL, "Error": _ERROR,
                    "CreateApproval": CreateApproval.model_json_schema(),
                    "Outcome": Outcome.model_json_schema()},
    },
}
