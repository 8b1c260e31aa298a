"""How should spelling and meaning combine? Measurements on the dev half, for the design of the
spelling channel (issue: "Spelling and meaning in one lookup").

Run:  pip install -e '.[bench]' && python benchmarks/matching_design.py [--query-dependent]
      [--encoder NAME]

For each rule score(q, k) = cosine(q, k) + w · f(spelling(q, k)), with f(s) = (max(0, s - tau) /
(1 - tau)) ** p and spelling one of rapidfuzz's normalised scores (ratio; the larger of ratio
and token_sort_ratio; that averaged with Jaro-Winkler), it prints:

* matching: top-1 accuracy on the ``dev`` half of every task of ``matching.py`` (typos, aliases,
  aliases with typos), and their mean;
* meaning: on the category words the default temperature was chosen on
  (``categories.py``, 64 paraphrase queries over 192 words), the log-likelihood and accuracy of
  the right category at T = 0.05, and the leave-one-out log-likelihood (each word as a query),
  against dense only (the first row).

What it showed (2026-11-22): a large weight reaches a mean top-1 of 0.81 on matching, at or
above rapidfuzz's best scorer on most typo tasks, but category accuracy falls from 0.844 to 0.30:
at T = 0.05 even a small spelling term is many nats, and Jaro-Winkler in particular finds short
unrelated words alike. Rules that keep meaning within a point reach only about 0.68 on matching.
The errors that remain are real words spelled like another key ("tool" -> "stool" at 0.91,
"weather" -> "sweater" at 0.88), and a typo's cosine to its key is often as low as theirs (a
quarter of country typos at 0.29 or less), so no gate on the cosine separates them: the spelling
weight has to depend on the query (for instance on how common its words are).

``--query-dependent`` prints a second table instead: that family, as softdict computes it
(``softdict.spelling``: the Indel and OSA similarity, the common-word share),
weight(q) = lexical · 4 · (known + (1 − known) · u(q)) and term = max(0, s − tau) / (1 − tau),
over lexical, known and tau; "issue" counts the 7 queries of the issue that must find their key
(Germny, ..., Deutschland, Burma).

What it showed (2026-11-22, dev half): the rows that keep meaning where it was (category
log-likelihood -0.524 and accuracy 0.844 against dense only's -0.523 and 0.844, leave-one-out
-0.808 against -0.778) and find all 7 are those whose real words get a weight of 0.25 or less
with tau 0.4 or more; among them the mean top-1 is 0.820 for the defaults (lexical 1, known
1/16: misspelt words 4, real words 0.25) and 0.821 for lexical 2, known 1/32 (misspelt 8, real
words 0.25), a difference of one query in a thousand. The defaults keep the smaller weight.
Giving real words 0.5 (known 1/8) gains 0.001 and costs 1.6 points of category accuracy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from categories import CATEGORIES
from matching import cached_embeddings, tasks

from softdict._attention import softmax
from softdict.encoders import resolve_encoder
from softdict.spelling import SpellingIndex, SpellingQueries, unknown_share

TEMPERATURE = 0.05


def spelling(queries: list[str], keys: list[str]) -> dict[str, np.ndarray]:
    """Normalised spelling similarities in [0, 1], by rapidfuzz (its C++ scorers, in parallel)."""
    from rapidfuzz import distance, fuzz, process, utils

    options = {"processor": utils.default_process, "workers": -1}
    ratio = np.asarray(process.cdist(queries, keys, scorer=fuzz.ratio, **options), np.float32)
    tokens = np.asarray(
        process.cdist(queries, keys, scorer=fuzz.token_sort_ratio, **options), np.float32
    )
    jaro = np.asarray(
        process.cdist(queries, keys, scorer=distance.JaroWinkler.normalized_similarity, **options),
        np.float32,
    )
    words = np.maximum(ratio, tokens) / 100
    return {"ratio": ratio / 100, "ratio|tokens": words, "(ratio|tokens)+jaro": (words + jaro) / 2}


def cosine(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """As softdict's cosine: a zero embedding (a static model's for a text of unknown tokens)
    scores 0 against everything, not NaN."""

    def unit(x: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.where(norms > 0, norms, 1.0)

    return unit(queries) @ unit(keys).T


ISSUE = {
    "Germny": "Germany",
    "Frnace": "France",
    "Untied States": "United States",
    "Brazl": "Brazil",
    "Swtzerland": "Switzerland",
    "Deutschland": "Germany",
    "Burma": "Myanmar",
}


def library_spelling(
    queries: list[str], keys: list[str], *, as_rule_7: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """softdict's spelling similarity of every query with every key (as ``rule-1`` to
    ``rule-3`` spell; ``as_rule_7``: reading accents and words in any order, as ``rule-7``),
    and each query's unknown share."""
    index = SpellingIndex()
    index.add(np.arange(len(keys)), keys)
    flags = {"accents": True, "edits_sorted": True, "as_typed": True} if as_rule_7 else {}
    spelled = SpellingQueries.of(queries, **flags)
    unknown = np.array([unknown_share(query) for query in queries])
    return index.similarity(spelled, np.arange(len(keys))), unknown


def query_dependent_rules(encoder, matching, meaning_sets) -> None:
    """The second table (module docstring)."""
    import pycountry

    countries = [c.name for c in pycountry.countries]
    issue_queries = list(ISSUE)
    issue = (
        cosine(encoder.encode_queries(issue_queries), encoder.encode_keys(countries)),
        *library_spelling(issue_queries, countries),
        np.array([countries.index(ISSUE[q]) for q in issue_queries]),
    )
    tasks_spelled = [
        (name, C, *library_spelling(queries, keys), target)
        for name, C, queries, keys, target in matching
    ]
    # meaning(rule) scores the paraphrase queries (C_q) and the words left out one by one
    # (C_l); each gets its own spelling similarities and unknown shares.
    (C_q, q_texts, _, w_texts), meaning = meaning_sets
    S_q, U_q = library_spelling(q_texts, w_texts)
    S_l, U_l = library_spelling(w_texts, w_texts)
    header = " | ".join(name for name, *_ in matching)
    print(
        f"\n| lexical, known, tau | issue | {header} | mean | meaning log-lik | meaning acc "
        "| leave-one-out log-lik |"
    )
    print("|" + "---|" * (len(matching) + 6))
    for lexical in (0.5, 1.0, 2.0):
        for known in (0.0, 1 / 32, 1 / 16, 1 / 8, 1 / 4):
            for tau in (0.3, 0.4, 0.5):

                def rule(C, S, U, lexical=lexical, known=known, tau=tau):
                    weights = lexical * 4.0 * (known + (1.0 - known) * U)  # rule-1's, tau aside
                    return C + weights[:, None] * np.maximum(0, S - tau) / (1 - tau)

                C_i, S_i, U_i, t_i = issue
                found = int(np.sum(np.argmax(rule(C_i, S_i, U_i), 1) == t_i))
                accuracies = [
                    float(np.mean(np.argmax(rule(C, S, U), 1) == t))
                    for _, C, S, U, t in tasks_spelled
                ]

                def on_meaning_sets(C, _S, rule=rule):
                    return rule(C, S_q, U_q) if C is C_q else rule(C, S_l, U_l)

                log_lik, acc, loo = meaning(on_meaning_sets)
                cells = " | ".join(f"{a:.3f}" for a in accuracies)
                print(
                    f"| {lexical}, {known:.4g}, {tau} | {found}/7 | {cells} | "
                    f"{np.mean(accuracies):.3f} | {log_lik:.3f} | {acc:.3f} | {loo:.3f} |",
                    flush=True,
                )


def main() -> None:
    # --encoder NAME: another encoder= (e.g. bundled-static) instead of the default.
    name = sys.argv[sys.argv.index("--encoder") + 1] if "--encoder" in sys.argv else None
    encoder = resolve_encoder(name, query_cache_size=0)
    matching = []
    queries_keys = []
    for task in tasks("dev", 400):
        C = cosine(
            cached_embeddings(encoder, task.queries, "queries"),
            cached_embeddings(encoder, task.keys, "keys"),
        )
        target = np.array([task.keys.index(t) for t in task.targets])
        matching.append((task.name, C, spelling(task.queries, task.keys), target))
        queries_keys.append((task.name, C, task.queries, task.keys, target))

    names = list(CATEGORIES)
    members = [(w, c) for c, n in enumerate(names) for w in CATEGORIES[n]["members"]]
    queries = [(t, c) for c, n in enumerate(names) for t in CATEGORIES[n]["queries"]]
    member_category = np.array([c for _, c in members])
    query_category = np.array([c for _, c in queries])
    onehot = np.eye(len(names))[member_category]
    member_vectors = encoder.encode_keys([w for w, _ in members])
    C_q = cosine(encoder.encode_queries([t for t, _ in queries]), member_vectors)
    S_q = spelling([t for t, _ in queries], [w for w, _ in members])
    C_l = cosine(member_vectors, member_vectors)
    S_l = spelling([w for w, _ in members], [w for w, _ in members])

    def meaning(rule) -> tuple[float, float, float]:
        mass = softmax(rule(C_q, S_q), TEMPERATURE) @ onehot
        own = mass[np.arange(len(query_category)), query_category]
        scores = rule(C_l, S_l)
        np.fill_diagonal(scores, -np.inf)  # each word predicted from the others
        loo = (softmax(scores, TEMPERATURE) @ onehot)[np.arange(len(members)), member_category]
        return (
            float(np.mean(np.log(np.maximum(own, 1e-300)))),
            float(np.mean(mass.argmax(1) == query_category)),
            float(np.mean(np.log(np.maximum(loo, 1e-300)))),
        )

    meaning_sets = ((C_q, [t for t, _ in queries], C_l, [w for w, _ in members]), meaning)
    if "--query-dependent" in sys.argv:
        query_dependent_rules(encoder, queries_keys, meaning_sets)
        return
    rules = [("dense only", lambda C, S: C)]
    for measure in ("ratio", "ratio|tokens", "(ratio|tokens)+jaro"):
        for tau in (0.0, 0.5, 0.7, 0.85):
            for p in (1, 2):
                for w in (0.25, 0.5, 1.0, 2.0, 8.0):

                    def rule(C, S, measure=measure, tau=tau, p=p, w=w):
                        return C + w * (np.maximum(0, S[measure] - tau) / (1 - tau)) ** p

                    rules.append((f"{measure}, tau={tau}, p={p}, w={w}", rule))

    header = " | ".join(name for name, *_ in matching)
    print(f"| rule | {header} | mean | meaning log-lik | meaning acc | leave-one-out log-lik |")
    print("|" + "---|" * (len(matching) + 5))
    rows = []
    for label, rule in rules:
        accuracies = [float(np.mean(np.argmax(rule(C, S), 1) == t)) for _, C, S, t in matching]
        rows.append((label, accuracies, *meaning(rule)))
    dense = rows[0]
    frontier = [dense, *sorted(rows[1:], key=lambda r: -np.mean(r[1]))]
    for label, accuracies, log_lik, acc, loo in frontier:
        cells = " | ".join(f"{a:.3f}" for a in accuracies)
        print(
            f"| {label} | {cells} | {np.mean(accuracies):.3f} | {log_lik:.3f} | {acc:.3f} | "
            f"{loo:.3f} |"
        )


if __name__ == "__main__":
    main()
