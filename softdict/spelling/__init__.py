"""The spelling channel: keys scored by how they are spelled as well as by what they mean.

    score(q, k) = meaning(q, k) + weight(q) · term(spelling(q, k))

``text`` turns keys and queries into the forms spelling is compared on and says how much of a
query is common words; ``scores`` holds the similarity (rapidfuzz), the term and the weights;
``index`` keeps each key's forms by id and finds spelling candidates in large stores through
the 3-gram postings of ``ngrams``. Retrieval (``softdict._retrieval``) combines the channels.
"""

from softdict.spelling.index import CANDIDATE_POOL, SpellingIndex
from softdict.spelling.scores import (
    SIMILARITY_FLOOR,
    UNKNOWN_WORD_WEIGHT,
    KeyForms,
    combined_score,
    query_weights,
    spelling_similarity,
    spelling_term,
)
from softdict.spelling.text import SpellingQueries, spelling_form, token_sorted, unknown_share

__all__ = [
    "CANDIDATE_POOL",
    "SIMILARITY_FLOOR",
    "UNKNOWN_WORD_WEIGHT",
    "KeyForms",
    "SpellingIndex",
    "SpellingQueries",
    "combined_score",
    "query_weights",
    "spelling_form",
    "spelling_similarity",
    "spelling_term",
    "token_sorted",
    "unknown_share",
]
