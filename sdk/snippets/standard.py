import os

from standardwebhooks.webhooks import Webhook  # pip install standardwebhooks


def verify_standard_webhook(raw_body: bytes, headers, secret: str = "") -> dict:
    """Returns the envelope of a delivery of a StandardWebhooks subscription, or raises (answer 401).

    raw_body: the body exactly as received (Flask: request.get_data()); headers: the request's headers
    (webhook-id, webhook-timestamp, webhook-signature). secret: the whsec_... secret; during a rotation either the
    new or the previous one verifies. A timestamp more than 5 minutes away from now is refused: a replayed capture.
    """
    return Webhook(secret or os.environ["WEBHOOK_SECRET"]).verify(raw_body, headers)


# A command line for this repository's tests (test/integration/standard-webhooks-snippets.test.ts):
#   WEBHOOK_SECRET=whsec_... python3 standard.py '<webhook-id>' '<webhook-timestamp>' '<webhook-signature>' < body
# prints the event's type and id and exits 0 when verified, prints why and exits 1 when refused.
if __name__ == "__main__":
    import sys

    webhook_id, timestamp, signature = sys.argv[1:4]
    headers = {"webhook-id": webhook_id, "webhook-timestamp": timestamp, "webhook-signature": signature}
    try:
        envelope = verify_standard_webhook(sys.stdin.buffer.read(), headers)
        print(f"verified {envelope['eventType']} {envelope['eventId']}")
    except Exception as refusal:  # the library's WebhookVerificationError, or a malformed header
        print(f"refused: {refusal}")
        sys.exit(1)
