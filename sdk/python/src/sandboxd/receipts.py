"""Offline receipt checks, the same as ``sandboxd verify-receipt``
(docs/receipts.md): the hash and Ed25519 signature of the canonical body
against a pinned signer, the receipt's id and signer in its signed body,
the output fingerprint against the reply you kept, the input fingerprint
against the code (or input object) you sent.

Only :func:`verify_receipt` needs the ``cryptography`` package (the
``verify`` extra; Debian: python3-cryptography); canonical JSON and the
fingerprints are standard library.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Mapping, Optional, Union

from .errors import ReceiptInvalid

Json = Union[None, bool, int, str, Mapping[str, Any]]


def canonical_json(obj: Json) -> bytes:
    """RFC 8785 (JCS) bytes of obj: objects, strings, integers, booleans and
    null (receipts use no floats and no arrays; those raise ValueError)."""
    return _jcs(obj, 0).encode("utf-8")


def _jcs(v: Any, depth: int) -> str:
    if depth > 32:
        raise ValueError("nested too deep")
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        # the escapes of JSON.stringify: \" \\ \b \f \n \r \t, other
        # controls as \u00xx (lowercase), everything else as itself
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, Mapping):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be"))  # by UTF-16 code units
        return "{" + ",".join(_jcs(k, depth) + ":" + _jcs(v[k], depth + 1) for k in keys) + "}"
    raise ValueError(f"not canonicalisable here: {type(v).__name__}")


def fingerprint(salt: str, obj: Mapping[str, Any]) -> str:
    """``"0x" + hex(SHA-256(salt_bytes || JCS(obj)))``, salt as ``"0x" + 64 hex``."""
    salt_bytes = bytes.fromhex(salt[2:] if salt.startswith("0x") else salt)
    return "0x" + hashlib.sha256(salt_bytes + canonical_json(obj)).hexdigest()


def _pinned_signer(signer: Optional[str], public_key_pem: Optional[str]) -> str:
    if (signer is None) == (public_key_pem is None):
        raise ValueError("pin the signer: give signer='0x...' or public_key_pem (GET /v1/receipts/public-key)")
    if signer is not None:
        s = signer.lower()
        if len(s) != 66 or not s.startswith("0x") or any(c not in "0123456789abcdef" for c in s[2:]):
            raise ValueError("signer must be 0x and 64 hex digits")
        return s
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = serialization.load_pem_public_key(public_key_pem.encode())  # type: ignore[union-attr]
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("public_key_pem is not an Ed25519 key")
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "0x" + raw.hex()


def _ed25519_ok(signer: str, signature: str, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(signer[2:]))
        key.verify(bytes.fromhex(signature[2:] if signature.startswith("0x") else signature), data)
        return True
    except (InvalidSignature, ValueError):
        return False


def verify_receipt(
    receipt: Mapping[str, Any],
    *,
    signer: Optional[str] = None,
    public_key_pem: Optional[str] = None,
    execution: Optional[Mapping[str, Any]] = None,
    code: Optional[str] = None,
    runtime: Optional[str] = None,
    input: Optional[Mapping[str, Any]] = None,
) -> str:
    """Check a receipt offline; return one line saying what was verified, or
    raise :class:`ReceiptInvalid` naming the check that failed.

    ``receipt`` is the body of ``GET /v1/receipts/{id}``. Pin the signer with
    ``signer`` (hex) or ``public_key_pem`` (fetched once and kept).
    ``execution``: the reply that carried the receipt (``Execution.raw``,
    ``ExecResult.raw``), for the output fingerprint. ``code`` and
    ``runtime`` (a ``run_code``), or ``input`` (an exec's ``{"command",
    "cwd", "env"}``), for the input fingerprint (needs ``execution``).
    """
    pinned = _pinned_signer(signer, public_key_pem)
    if (code is None) != (runtime is None) or (code is not None and input is not None):
        raise ValueError("code and runtime go together, instead of input")
    if (code is not None or input is not None) and execution is None:
        raise ValueError("checking the input needs execution (its salt)")
    body, rid = receipt.get("body"), receipt.get("id")
    hash_, sig = receipt.get("hash"), receipt.get("signature")
    if not isinstance(body, Mapping) or not all(isinstance(x, str) for x in (rid, hash_, sig)):
        raise ReceiptInvalid("not a receipt (GET /v1/receipts/{id}: id, hash, signature, body)")
    try:
        canon = canonical_json(body)
    except (ValueError, UnicodeEncodeError) as e:
        raise ReceiptInvalid(f"the receipt body is not canonicalisable ({e})") from None
    if body.get("id") != rid:
        raise ReceiptInvalid(f"the receipt id {rid!r} is not the one in its signed body")
    if not isinstance(body.get("signer"), str) or body["signer"].lower() != pinned:
        raise ReceiptInvalid(f"signed by {body.get('signer')}, not by the pinned signer {pinned}")
    if hash_.lower() != "0x" + hashlib.sha256(canon).hexdigest():
        raise ReceiptInvalid("the hash is not the SHA-256 of the canonical body")
    if not _ed25519_ok(pinned, sig, canon):
        raise ReceiptInvalid("the signature does not verify with the pinned signer's key")
    what = "hash, signature"
    salt = None
    if execution is not None:
        salt = _check_output(body, rid, execution)
        what += ", output fingerprint"
    inp: Optional[Mapping[str, Any]] = {"code": code, "runtime": runtime} if code is not None else input
    if inp is not None:
        try:
            ok = fingerprint(salt, inp) == body.get("input_fingerprint")  # type: ignore[arg-type]
        except ValueError:
            ok = False
        if not ok:
            raise ReceiptInvalid("the input does not match the receipt's input_fingerprint")
        what += ", input fingerprint"
    return f"receipt {rid} signed by {pinned} ({what} verified)"


def _check_output(body: Mapping[str, Any], rid: str, ex: Mapping[str, Any]) -> str:
    """The output fingerprint of the kept reply; returns its salt."""
    rr = ex.get("receipt") if isinstance(ex.get("receipt"), Mapping) else {}
    billing = ex.get("billing") if isinstance(ex.get("billing"), Mapping) else {}
    salt = billing.get("fingerprint_salt") or rr.get("fingerprint_salt")
    if rr.get("id") != rid or not isinstance(salt, str):
        raise ReceiptInvalid("the reply does not carry this receipt (receipt.id) and its fingerprint_salt")
    if body.get("operation") == "sandbox.execute" and body.get("execution_id") != ex.get("id"):
        raise ReceiptInvalid(f"the receipt is for execution {body.get('execution_id')!r}, not {ex.get('id')!r}")
    out: Dict[str, Any] = {k: ex.get(k) for k in ("exit_code", "stderr", "stdout")}
    if (
        not isinstance(out["exit_code"], int)
        or isinstance(out["exit_code"], bool)
        or not isinstance(out["stdout"], str)
        or not isinstance(out["stderr"], str)
    ):
        raise ReceiptInvalid("the reply lacks exit_code, stdout or stderr")
    try:
        ok = fingerprint(salt, out) == body.get("output_fingerprint")
    except ValueError:
        ok = False
    if not ok:
        raise ReceiptInvalid("the output (exit_code, stdout, stderr) does not match the receipt's output_fingerprint")
    return salt
