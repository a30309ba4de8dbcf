"""Verifies Standard Webhooks requests with the official Python library (PyPI `standardwebhooks`).

Reads a JSON list of {"secret", "headers", "body" (base64), "laterSeconds"} from stdin; prints a JSON list of
{"ok": true, "eventId"} or {"ok": false, "error"}. `laterSeconds` verifies as that many seconds after now (a capture
replayed later): the library's clock is moved, nothing else.
"""
import base64
import json
import sys
from datetime import datetime, timedelta

import standardwebhooks.webhooks as library


def verify(case):
    later = case.get("laterSeconds", 0)

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(seconds=later)

    library.datetime = Clock
    try:
        payload = library.Webhook(case["secret"]).verify(base64.b64decode(case["body"]), case["headers"])
        return {"ok": True, "eventId": payload["eventId"]}
    except Exception as error:  # the library's WebhookVerificationError, or a malformed case
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}
    finally:
        library.datetime = datetime


print(json.dumps([verify(case) for case in json.load(sys.stdin)]))
