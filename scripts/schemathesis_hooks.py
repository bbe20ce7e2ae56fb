"""Schemathesis hooks for scripts/api-fuzz: what the API's schema cannot
say, so that the generated "valid" requests are valid. Nothing here hides a
refusal: a value these hooks do not recognise is left as generated.

- A seckill voucher's window: `beginTime` before `endTime` in whole
  seconds (fractions are dropped, as the table drops them), both between
  1000-01-01 and 9999-12-31 in UTC. JSON Schema cannot compare two fields,
  and a date-time's offset can move it across a year bound.
- `Idempotency-Key`: a key is one request's. The generator draws few
  distinct keys, so a valid one would come back on another request and be
  answered 422 (IDEMPOTENCY_KEY_REUSED), rightly; each valid key is made
  unique instead.
"""
import datetime
import re
import uuid

import schemathesis

PRINTABLE_KEY = re.compile(r"^[!-~]{1,255}$")


def _parse(value):
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _storable(moment):
    try:
        utc = moment.astimezone(datetime.timezone.utc)
    except OverflowError:
        # 0001-01-01 at +01:00 or 9999-12-31 at -01:00: beyond Python's
        # range in UTC, and beyond MariaDB's too.
        return moment.replace(year=2000 if moment.year < 5000 else 2100)
    if utc.year < 1001:
        return moment.replace(year=2000)
    if utc.year > 9998:
        return moment.replace(year=2100)
    return moment


def _second(moment):
    """The service keeps whole seconds: 10:00:00 to 10:00:00.35 is empty."""
    return moment.replace(microsecond=0)


@schemathesis.hook.apply_to(path="/voucher/seckill", method="POST")
def map_body(ctx, body):
    if not isinstance(body, dict):
        return body
    begin, end = _parse(body.get("beginTime")), _parse(body.get("endTime"))
    if begin is None or end is None:
        return body
    begin, end = _storable(begin), _storable(end)
    if _second(end) <= _second(begin):
        begin, end = end, begin
    if _second(end) <= _second(begin):
        end = begin + datetime.timedelta(hours=1)
    body["beginTime"], body["endTime"] = begin.isoformat(), end.isoformat()
    return body


@schemathesis.hook
def map_headers(ctx, headers):
    if headers and isinstance(headers.get("Idempotency-Key"), str) and PRINTABLE_KEY.match(headers["Idempotency-Key"]):
        headers["Idempotency-Key"] = "fuzz-" + uuid.uuid4().hex
    return headers
