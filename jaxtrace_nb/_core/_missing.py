"""The one rule for a missing value, and what each reader turns one into (pure, no pandas needed).

A value is missing when it is None, NaN, pandas' NaT or NA, or anything else that is not
equal to itself (or cannot say whether it is). Every place that reads a recorded value
(the summary's sums, the views' rows, a persisted line, a DataFrame cell, the comparison of
processes) asks `missing`, then converts what is present its own way:

* `present`: the value, or None;
* `number`: a float, or None;
* `json_value`: what JSON carries (`allow_nan=False`): None for a missing or infinite float,
  an ISO string for a datetime;
* `python_value`: a DataFrame cell as the log holds it: Python numbers and datetimes.
"""

from __future__ import annotations

import datetime
import math
from typing import Any


def missing(value: Any) -> bool:
    """Whether `value` is None, NaN, NaT, pandas' NA, or another value not equal to itself."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # pandas' NA refuses to be a bool; so does an array
        return True


def present(value: Any) -> Any:
    """`value`, or None when it is missing."""
    return None if missing(value) else value


def number(value: Any) -> float | None:
    """`value` as a float, or None when it is missing."""
    return None if missing(value) else float(value)


def json_value(value: Any) -> Any:
    """`value` as JSON carries it: None when missing or an infinite float, a datetime as ISO
    text."""
    if (isinstance(value, float) and not math.isfinite(value)) or missing(value):
        return None
    return value.isoformat() if isinstance(value, datetime.datetime) else value


def python_value(value: Any) -> Any:
    """A DataFrame cell as the log holds it: None when missing, Python numbers and datetimes."""
    if missing(value):
        return None
    if hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value
