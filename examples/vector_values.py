"""Vector values blended by meaning: nutrition facts for foods, looked up by description.

Run:  python examples/vector_values.py
Each key holds a vector (kcal, protein g, sugar g per 100 g); a lookup blends the vectors of
the foods whose names mean something close to the query.
"""

from softdict import SoftDict

COLUMNS = ("kcal", "protein", "sugar")
FOODS = {
    "apple": [52, 0.3, 10.4],
    "banana": [89, 1.1, 12.2],
    "strawberries": [32, 0.7, 4.9],
    "chicken breast": [165, 31.0, 0.0],
    "salmon fillet": [208, 20.0, 0.0],
    "tofu": [76, 8.0, 0.6],
    "milk chocolate": [535, 7.7, 51.5],
    "glazed doughnut": [452, 4.9, 22.9],
    "white rice": [130, 2.7, 0.1],
    "wholemeal bread": [247, 13.0, 6.0],
}

foods = SoftDict(FOODS)
print(f"{len(foods)} foods, vectors of {', '.join(COLUMNS)} per 100 g\n")
for query in ["a sweet fruit", "lean protein for dinner", "a sugary treat", "something with carbs"]:
    attention = foods.attend(query)
    blend = ", ".join(f"{name} {value:.1f}" for name, value in zip(COLUMNS, attention.value))
    top = ", ".join(f"{key} {weight:.0%}" for key, weight in attention.top(3))
    print(f"{query!r:28} -> {blend}\n{'':31}from {top}")
