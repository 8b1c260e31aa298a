"""Fuzzy matching in an app: map what users type to canonical country codes, with no-match.

Run:  python examples/fuzzy_matching.py [--plot attention.png]
A categorical store: each key is a way of naming a country, each value its ISO code. A lookup
returns the code with the most attention; keys are scored by meaning ("Deutschland" is Germany)
and by spelling ("Germny" is too); min_score turns "nothing similar" into None instead of a weak
guess. With --plot (and `pip install softdict[plot]`), the attention weights of one query
are drawn as a bar chart and saved as a PNG.
"""

import argparse

from softdict import SoftDict

NAMES = {
    "United States": "US",
    "United States of America": "US",
    "America": "US",
    "United Kingdom": "GB",
    "Great Britain": "GB",
    "England": "GB",
    "Germany": "DE",
    "Federal Republic of Germany": "DE",
    "France": "FR",
    "French Republic": "FR",
    "Japan": "JP",
    "Netherlands": "NL",
    "Holland": "NL",
    "Spain": "ES",
    "Italy": "IT",
}
TYPED = [
    "USA",
    "the states",
    "Britain",
    "UK",
    "Deutschland",
    "the Netherlands",
    "Nippon",
    "españa",
    "Germny",
    "Itlay",
    "Untied Kingdom",
    "my shopping list",
]

parser = argparse.ArgumentParser()
parser.add_argument("--plot", metavar="PNG", help="save a bar chart of one query's attention")
args = parser.parse_args()

countries = SoftDict(NAMES)
for text, code in zip(TYPED, countries.lookup(TYPED, min_score=0.45, default=None)):
    if code is None:
        print(f"{text!r:20} -> no match (nothing scored 0.45)")
    else:
        best = countries.attend(text).distribution
        print(f"{text!r:20} -> {code}  (p = {best[code]:.2f})")

if args.plot:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no screen needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plotting needs matplotlib: pip install 'softdict[plot]'") from None
    attention = countries.attend("Britain")
    keys, weights = attention.keys[:8], attention.weights[:8]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh(range(len(keys))[::-1], weights, color="tab:blue")
    ax.set_yticks(range(len(keys))[::-1], [f"{k} ({NAMES[k]})" for k in keys])
    ax.set_xlabel("attention weight")
    ax.set_title(f"attention of 'Britain' (T = {countries.temperature})")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)
    print(f"saved {args.plot}")
