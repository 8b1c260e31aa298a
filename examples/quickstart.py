"""softdict in one minute: a dictionary whose lookups go by meaning.

Run:  python examples/quickstart.py
Uses the bundled all-MiniLM-L6-v2 encoder, offline.
"""

from softdict import SoftDict

prices = SoftDict({"apple": 10, "banana": 5, "chair": 2})

# Exact access is a plain dict.
print("prices['apple'] =", prices["apple"])

# A soft lookup embeds the query and attends over every key: softmax(sim(q, K) / T) · V.
print(f"lookup('fruit') = {prices.lookup('fruit'):.3f}")

attention = prices.attend("fruit")
print(f"\nattention of 'fruit' (temperature {prices.temperature}):")
for key, weight, score in zip(attention.keys, attention.weights, attention.scores):
    print(f"  {key:<8} weight {weight:.4f}   cosine {score:.3f}   value {prices[key]}")

# A warmer temperature blends more evenly.
prices.temperature = 0.1
print(f"\nat temperature 0.1: lookup('fruit') = {prices.lookup('fruit'):.3f}")
for key, weight in prices.attend("fruit").top(3):
    print(f"  {key:<8} weight {weight:.4f}")

# Many queries at once are encoded and scored in one batch.
queries = ["fruit", "furniture"]
print("\nbatch:", {q: round(float(v), 3) for q, v in zip(queries, prices.lookup(queries))})

# Below min_score there is no match: get a default instead of a weak blend.
print(
    "lookup('quantum physics', min_score=0.5, default=None) ->",
    prices.lookup("quantum physics", min_score=0.5, default=None),
)
