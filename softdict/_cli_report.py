"""How ``softdict query`` prints one query's result: its value, and with ``--explain`` or
``--json`` the keys it attended to, their weights and scores, and how much of the store it
covered."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from softdict._results import Attention

__all__ = ["printed", "report"]

_BAR_WIDTH = 40
# --explain shows at most this many characters of a key, so long keys keep the bars in line.
_KEY_WIDTH = 40
# C0 and C1 control characters (ESC starts a terminal's escape sequences), as Python escapes them.
_ESCAPED_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(32), *range(127, 160))}


def plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def printed(value: Any) -> str:
    """A value as plain output prints it: a number to six significant digits, but rounded to a
    whole number where that would take an exponent below 10^15 (a price of 1,234,567 is no
    "1.23457e+06"); a vector or label as JSON, exactly."""
    value = plain(value)
    if not isinstance(value, float):
        return json.dumps(value, ensure_ascii=False)
    shown = f"{value:.6g}"
    return f"{value:.0f}" if "e+" in shown and abs(value) < 1e15 else shown


def _short(key: str) -> str:
    """A key as --explain shows it: control characters escaped (a key from an untrusted table
    could move the terminal's cursor or clear its screen), then cut to ``_KEY_WIDTH``."""
    key = key.translate(_ESCAPED_CONTROLS)
    return key if len(key) <= _KEY_WIDTH else key[: _KEY_WIDTH - 1] + "…"


def _coverage(attention: Attention) -> str:
    """How much of the store a lookup's attention covered, in words."""
    if attention.tail_mass is None:
        text = f"top-k attention over the {attention.k} nearest keys"
        if attention.tail_bound is not None:
            text += f"; full attention would give at most {attention.tail_bound:.2%} elsewhere"
        return text
    if not attention.tail_mass:
        return f"attention over all {attention.k} keys"
    if attention.tail_interval is None or attention.tail_interval[0] == attention.tail_interval[1]:
        return f"attention over {attention.k + attention.sampled} keys, exactly"
    low, high = attention.tail_interval
    return (
        f"{attention.k} keys scored exactly, {attention.sampled} sampled for the rest: "
        f"{attention.tail_mass:.2%} of the attention (interval {low:.2%}-{high:.2%})"
    )


def report(attention: Attention, combination: str, args: argparse.Namespace) -> bool:
    """Print one query's result; whether it matched (its best score reached ``min_score``)."""
    min_score, top = args.min_score, args.top
    matched = min_score is None or bool(attention.scores[0] >= min_score)
    shown = list(zip(attention.keys, attention.weights, attention.scores))[:top]
    meaning = attention.meaning_scores.tolist()
    # A key whose spelling was not scored (NaN: it could not matter) shows none: null in JSON.
    spelling = (
        None
        if attention.spelling_scores is None
        else [None if math.isnan(s) else s for s in attention.spelling_scores.tolist()]
    )
    if args.json:
        result: dict[str, Any] = {"query": attention.query, "match": matched}
        if matched:
            result |= {"value": plain(attention.value), "k": attention.k}
            result["tail_mass"] = attention.tail_mass
            result["tail_interval"] = attention.tail_interval
            result["tail_bound"] = attention.tail_bound
            result["sampled"] = attention.sampled
            result["value_stderr"] = plain(attention.value_stderr)
            result["keys"] = [
                {"key": k, "weight": float(w), "score": float(s), "meaning": meaning[i]}
                | ({} if spelling is None else {"spelling": spelling[i]})
                | ({} if attention.marks is None else {"marks": list(attention.marks[i])})
                for i, (k, w, s) in enumerate(shown)
            ]
            result["spelling_weight"] = attention.spelling_weight
            result["meaning_factor"] = attention.meaning_factor
            result["score_offset"] = attention.score_offset
        else:
            result |= {
                "min_score": min_score,
                "best": {"key": shown[0][0], "score": float(shown[0][2])},
            }
        print(json.dumps(result, ensure_ascii=False))
        return matched
    if not matched:
        print(f"no match (best: {shown[0][0]!r} at {shown[0][2]:.3f} < {min_score})")
        return False
    print(printed(attention.value))
    if args.explain:
        width = max(len(_short(k)) for k, _, _ in shown)
        for i, (key, weight, score) in enumerate(shown):
            bar = "█" * round(weight * _BAR_WIDTH)
            parts = f"meaning {meaning[i]:.3f}"
            if spelling is not None:
                parts += ", spelling " + ("-" if spelling[i] is None else f"{spelling[i]:.3f}")
            if attention.marks is not None and attention.marks[i]:
                parts += ", " + "+".join(attention.marks[i])
            print(f"  {_short(key):<{width}}  {weight:6.1%}  {bar:<{_BAR_WIDTH}}  ", end="")
            print(f"(score {score:.3f}: {parts})")
        print(f"  {_coverage(attention)}")
        if spelling is not None:
            print(
                f"  score = meaning × {attention.meaning_factor:.3g} "
                f"+ {attention.score_offset:.3g} + what spelling adds "
                f"(up to {attention.spelling_weight:.3g}) + marks ({combination})"
            )
    return True
