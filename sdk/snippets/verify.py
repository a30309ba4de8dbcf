import base64
import hashlib
import hmac
import json
import os


def verify_webhook(raw_body, headers, secrets, signature_header="X-Webhook-Signature"):
    """Returns the envelope of a Core Webhooks delivery, or raises ValueError (answer 401, process nothing).

    raw_body: the request body as bytes, exactly as received (Flask: request.get_data(), Django: request.body).
    headers: the request headers (looked up case-insensitively). secrets: the subscription's secret, or during a
    rotation the new and the previous one.
    """
    signatures = [value for name, value in headers.items() if name.lower() == signature_header.lower()]
    if not signatures or not signatures[0].strip():
        raise ValueError("missing " + signature_header + " header")
    given = signatures[0].strip().encode("ascii", "replace")
    matched = False
    for secret in secrets:
        # The secret is the key as UTF-8 text, exactly as returned (not base64-decoded); the message is the raw body.
        digest = hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).digest()
        if hmac.compare_digest(base64.b64encode(digest), given):  # constant time
            matched = True
    if not matched:
        raise ValueError("invalid signature")
    return json.loads(raw_body.decode("utf-8"))  # parsed only once verified


def secrets_from_env():
    """The subscription's secret, and the previous one for 24 hours after a rotation."""
    return [s for s in (os.environ.get("WEBHOOK_SECRET"), os.environ.get("WEBHOOK_PREVIOUS_SECRET")) if s]


# A command line for this repository's tests (sdk/snippets.test.ts), used like a receiver would be:
#   WEBHOOK_SECRET=... [WEBHOOK_PREVIOUS_SECRET=...] python3 verify.py '<signature header>' < body
# prints the event's type and id and exits 0 when verified, prints why and exits 1 when refused.
if __name__ == "__main__":
    import sys

    headers = {"X-Webhook-Signature": sys.argv[1]} if len(sys.argv) > 1 else {}
    try:
        envelope = verify_webhook(sys.stdin.buffer.read(), headers, secrets_from_env())
    except ValueError as refusal:
        print("refused: " + str(refusal))
        sys.exit(1)
    print("verified " + envelope["eventType"] + " " + envelope["eventId"])
