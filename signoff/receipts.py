"""Signed receipts: what a decision on one call was, signed with Ed25519 so that someone who does not
trust Signoff's database can check it.

A receipt is `{"receipt": <fields>, "signature": <base64>}`; the signature covers the canonical
JSON of the fields (`signoff.canonical`), one of which is the id of the key that signed (`key_id`).
The server signs (`sign`) in the transaction that records the decision; `signoff audit verify`
and the client (`signoff.client.verify_receipt`) check (`receipt_problem`, `verify_receipt`).
This module needs only `cryptography` and the standard library: the client uses it without the
server's runtime.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from signoff.canonical import arguments_digest, canonical_json

__all__ = [
    "RECEIPT_FORMAT",
    "InvalidReceipt",
    "fingerprint",
    "key_id",
    "private_key_pem",
    "public_key_pem",
    "read_private_key",
    "read_public_key",
    "receipt_problem",
    "sign",
    "verify_receipt",
]

RECEIPT_FORMAT: Final = 1
"""The receipt's fields as this Signoff writes them (`format` in each receipt)."""


class InvalidReceipt(Exception):
    """A receipt that does not prove what it was asked to: not signed by a trusted key, changed
    since it was signed, or for another call."""


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short name for a public key: the first 16 hex digits of the SHA-256 of its raw bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def read_private_key(pem: bytes) -> Ed25519PrivateKey:
    """The Ed25519 private key in `pem` (PKCS#8, unencrypted). Raises ValueError for anything else."""
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def read_public_key(pem: bytes) -> Ed25519PublicKey:
    """The Ed25519 public key in `pem` (SubjectPublicKeyInfo), or the public half of a private key's
    PEM. Raises ValueError for anything else."""
    if b"PRIVATE KEY" in pem:
        return read_private_key(pem).public_key()
    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def sign(fields: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """`fields` as a receipt signed with `key` (its `key_id` and the format added to the fields)."""
    signed = {**fields, "format": RECEIPT_FORMAT, "key_id": key_id(key.public_key())}
    signature = key.sign(canonical_json(signed).encode())
    return {"receipt": signed, "signature": base64.b64encode(signature).decode("ascii")}


def fingerprint(receipt: Mapping[str, Any]) -> str:
    """A receipt in short, for a person to compare by eye: 12 hex digits of its signature's SHA-256."""
    return hashlib.sha256(str(receipt.get("signature", "")).encode()).hexdigest()[:12]


def receipt_problem(receipt: Any, trusted: Iterable[Ed25519PublicKey]) -> str | None:
    """Why `receipt` is not a receipt signed by one of the `trusted` keys, exactly as signed, or None
    if it is."""
    if not isinstance(receipt, Mapping) or not isinstance(receipt.get("receipt"), Mapping):
        return "it is not a receipt"
    fields = receipt["receipt"]
    keys = {key_id(key): key for key in trusted}
    key = keys.get(str(fields.get("key_id")))
    if key is None:
        return f"it is signed by key {fields.get('key_id')!r}, which is not trusted here"
    try:
        signature = base64.b64decode(str(receipt.get("signature", "")), validate=True)
        key.verify(signature, canonical_json(fields).encode())
    except (binascii.Error, InvalidSignature):
        return "its signature does not match its contents: it was changed after it was signed"
    return None


def verify_receipt(receipt: Any, public_key: Ed25519PublicKey | bytes | str, *, tool: str,
                   args: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt's fields, if `receipt` is signed by `public_key` (the key, or its PEM) and approves
    exactly this call: `tool` with `args`. Raises `InvalidReceipt` saying why not.

    A tool or service that runs side effects can refuse to act without one: it checks the receipt
    against the arguments it is about to use, so a call approved with other arguments, a denial,
    or a receipt changed on the way does not pass.
    """
    if isinstance(public_key, str):
        public_key = public_key.encode()
    key = read_public_key(public_key) if isinstance(public_key, bytes) else public_key
    problem = receipt_problem(receipt, [key])
    if problem is not None:
        raise InvalidReceipt(f"receipt refused: {problem}")
    fields = dict(receipt["receipt"])
    where = f"receipt {fields.get('approval_id') or fields.get('key')}"
    if fields.get("tool") != tool:
        raise InvalidReceipt(f"{where} is for tool {fields.get('tool')!r}, not {tool!r}")
    if fields.get("arguments_digest") != arguments_digest(tool, dict(args)):
        raise InvalidReceipt(f"{where} is for other arguments than these")
    if fields.get("decision") not in ("approved", "allowed", "granted"):
        raise InvalidReceipt(f"{where} does not let the call run: it was {fields.get('decision')!r}")
    return fields
