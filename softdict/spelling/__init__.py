"""The spelling channel: keys scored by how they are spelled as well as by what they mean.

``text`` turns keys and queries into the forms spelling is compared on and says how much of a
query is common words; ``scores`` holds the similarity (rapidfuzz); ``evidence`` a query's
description and the exact marks of a pair; ``combination`` how meaning, spelling and marks make
one score (the hand-set rule, and the learned combination); ``bounds`` and ``bounded`` score
spelling only where it can matter; ``index`` keeps each key's forms by id and finds spelling
candidates in large stores through the 3-gram postings of ``ngrams``; ``source`` names what a
lookup asks of it (which a large Milvus store answers from Milvus); ``fusion`` combines the
channels in a lookup (retrieval, ``softdict._retrieval``, calls it; it is not imported here, as
it builds on retrieval's own types).
"""

from softdict.spelling.index import CANDIDATE_POOL, SpellingIndex
from softdict.spelling.scores import KeyForms, spelling_similarity
from softdict.spelling.source import SpellingSource
from softdict.spelling.text import SpellingQueries, spelling_form, token_sorted, unknown_share

__all__ = [
    "CANDIDATE_POOL",
    "KeyForms",
    "SpellingIndex",
    "SpellingQueries",
    "SpellingSource",
    "spelling_form",
    "spelling_similarity",
    "token_sorted",
    "unknown_share",
]
