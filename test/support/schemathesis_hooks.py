"""Schemathesis hooks of the OpenAPI contract test (test/integration/openapi-contract.test.ts).

A few rules of the APIs depend on things outside the request, which no schema can state: a subscriber URL's host is
judged by DNS when the subscription is written, a cursor is a token only the server issues, an order row names an
item of the tenant, and a subscription filter's payload paths must be in the event types' schemas (its grammar is
stated in prose: spelt out as a schema, it made generation run for minutes; core/subscriptions/filter.test.ts tests it
with generated filters instead). Requests that schemathesis generates as valid ("positive") get values that meet those rules,
exactly as a client would send them; the documents describe the rules and the 400 they answer otherwise, and every
negative request, and every other part of a positive one, is sent as generated.
"""

import os
import re
from datetime import datetime

import schemathesis

# Public addresses (not private, loopback, documentation…): the server judges an IP literal host without DNS.
PUBLIC_HOSTS = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "[2606:4700:4700::1111]"]
URL = re.compile(r"^(https?://)([^/?#\[:]+|\[[^\]]*\])(.*)$", re.DOTALL)
MAX_URL_LENGTH = 2048
ITEM_ID = os.environ.get("CONTRACT_ITEM_ID", "")
# The purchase catalogue's event types (producer/catalogue-publisher.ts, passed by test/support/schemathesis.ts), whose
# payloads the filters below are valid for.
PURCHASE_TYPES = os.environ["CONTRACT_PURCHASE_TYPES"].split(",")
# Valid for every event type of the purchase catalogue, chosen by the generated filter's size (a few shapes); the
# first alone for a subscription to operational events only.
FILTERS = [
    {},
    {"eventType": "purchaseOrder.validated"},
    {"payload.totalAmount": {"$gte": "100.5"}, "payload.currency": {"$in": ["EUR", "USD"]}},
    {"$or": [{"payload.rows.itemCode": {"$startsWith": "BOLT-"}}, {"$not": {"reference": None}}]},
]


def _public(url):
    """The URL with its host replaced by a public address (the path, query and port as generated)."""
    match = URL.match(url) if isinstance(url, str) else None
    if match is None:
        return url
    scheme, host, rest = match.groups()
    public = PUBLIC_HOSTS[sum(map(ord, host)) % len(PUBLIC_HOSTS)]
    replaced = f"{scheme}{public}{rest}"
    return replaced if len(replaced) <= MAX_URL_LENGTH else f"{scheme}{public}/"


def _instant(text):
    """An RFC 3339 date-time as an aware datetime, or None where Python cannot read it (year 0, a leap second)."""
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except (TypeError, ValueError):
        return None


def _matches(pattern, event_type):
    """core/event-types.ts matchesEventType for a purchase type: `*` is one whole segment."""
    wanted, actual = pattern.split("."), event_type.split(".")
    return len(wanted) == len(actual) and all(w in ("*", a) for w, a in zip(wanted, actual))


def _subscribes_to_purchase(event_types):
    return isinstance(event_types, list) and any(
        isinstance(pattern, str) and _matches(pattern, event_type)
        for pattern in event_types
        for event_type in PURCHASE_TYPES
    )


def _is_positive(case):
    return case.meta is not None and case.meta.generation.mode.is_positive


@schemathesis.hook
def before_call(context, case, kwargs):
    if not _is_positive(case):
        return
    operation_id = case.operation.definition.raw.get("operationId")
    # Only the server issues cursors: a valid listing request carries none it made up (the links follow real ones).
    if isinstance(case.query, dict):
        case.query.pop("cursor", None)
    body = case.body
    if operation_id in ("createSubscription", "updateSubscription") and isinstance(body, dict):
        if "url" in body:
            body["url"] = _public(body["url"])
        if isinstance(body.get("oauth2"), dict) and "tokenUrl" in body["oauth2"]:
            body["oauth2"]["tokenUrl"] = _public(body["oauth2"]["tokenUrl"])
        # Payload paths only where the request subscribes to a purchase type: the operational events (subscription.*,
        # delivery.abandoned) have payloads of their own, and an update without eventTypes keeps the stored ones
        # (which an earlier request of the run may have set to operational types only).
        purchase = _subscribes_to_purchase(body.get("eventTypes"))
        if isinstance(body.get("filter"), dict):
            choices = FILTERS if purchase else FILTERS[:1]
            body["filter"] = choices[len(body["filter"]) % len(choices)]
        elif operation_id == "updateSubscription" and "eventTypes" in body and "filter" not in body and not purchase:
            # The server judges the stored filter again when the types change (400 where a payload path is in none of
            # the new types' schemas): a client moving a subscription to operational events only clears its filter.
            body["filter"] = FILTERS[0]
    # A bulk replay's or a history listing's `to` is after its `from` (400 otherwise, as the documents say): a drawn
    # `to` that is not is left out.
    ranged = body if operation_id == "createReplayJob" else case.query if operation_id == "listDeliveries" else None
    if isinstance(ranged, dict) and "from" in ranged and "to" in ranged:
        start, end = _instant(ranged["from"]), _instant(ranged["to"])
        if start is None or end is None or end <= start:
            del ranged["to"]
    if operation_id in ("createPurchaseOrder", "amendPurchaseOrder") and isinstance(body, dict):
        for row in body.get("rows") or []:
            if isinstance(row, dict):
                row["itemId"] = ITEM_ID
