"""Recall search: the whole per-search path of a few lexical engines at 1,000 and 10,000 archived messages of one
conversation, bytes per archived message, and hit@k on planted facts.

    python bench/recall_search.py [--searches 200] [--seeds 3]

What a worker does on a turn that searches: read the archive's bytes (from Redis; here from memory, the read is the
store's and the same for all), decompress, then index or load a stored index, rank, and pick the messages around
the hits. Each engine is timed on that whole path (CPU time of the thread, ``time.thread_time``), not only its
ranking:

- **hand BM25, per search** (the baseline): decode the archive's batches, fold and split every text, build an
  inverted index in Python, score the query's terms (k1 1.2, b 0.75);
- **hand BM25, stored postings**: the inverted index built at archive time and stored (marshal, zstd); a search
  loads it and decodes the batches for the texts;
- **rank_bm25 / bm25s, per search** (``pip install -r bench/requirements-peers.txt``; skipped when missing): decode,
  split, their index, their scores;
- **FTS5, per search**: decode, split, insert into an in-memory FTS5 table, ask it;
- **FTS5, stored** (:class:`worker.conversation.recall.index.SearchIndex`): load the stored database (zstd,
  ``sqlite3.deserialize``), ask it, read the hits and their neighbours (:func:`~worker.conversation.recall.recall`).

Quality: hit@k: the planted answer is one of the top k hits or in a hit's context (the message before, the two
after), over the planted facts of ``--seeds`` conversations (bench/recall_chat.py: varied chatter in several
languages that shares the facts' common words). The FTS5 engines also run with the Porter stemmer to see whether
stemming helps.
"""

from __future__ import annotations

import argparse
import marshal
import math
import sqlite3
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lzma

import zstandard

from bench.recall_chat import Fact, conversation
from worker.conversation.recall import SearchIndex, decode_archive, encode_batch, recall
from worker.conversation.recall.archived import ArchivedMessage
from worker.conversation.recall.index import match_expression
from worker.conversation.recall.terms import terms

K1, B = 1.2, 0.75
TOP = 5
# An engine's search: (the archive's stored bytes, the query) -> positions of the hits, best first.
Search = Callable[[dict[str, bytes], str], list[int]]


def _bm25(postings: dict[str, list[tuple[int, int]]], lengths: Sequence[int], query: str) -> list[int]:
    n, average = len(lengths), (sum(lengths) / len(lengths) if lengths else 1.0)
    scores: dict[int, float] = {}
    for term in dict.fromkeys(terms(query)):
        hits = postings.get(term, ())
        if not hits:
            continue
        idf = math.log(1 + (n - len(hits) + 0.5) / (len(hits) + 0.5))
        for doc, tf in hits:
            scores[doc] = scores.get(doc, 0.0) + idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[doc] / average))
    return sorted(scores, key=scores.__getitem__, reverse=True)[:TOP]


def _postings(messages: Sequence[ArchivedMessage]) -> tuple[dict[str, list[tuple[int, int]]], list[int]]:
    postings: dict[str, list[tuple[int, int]]] = {}
    lengths: list[int] = []
    for doc, message in enumerate(messages):
        words = terms(message.text)
        lengths.append(len(words))
        for term, tf in Counter(words).items():
            postings.setdefault(term, []).append((doc, tf))
    return postings, lengths


def hand_per_search(stored: dict[str, bytes], query: str) -> list[int]:
    return _bm25(*_postings(decode_archive(stored["batches"])), query)


def hand_stored(stored: dict[str, bytes], query: str) -> list[int]:
    postings, lengths = marshal.loads(zstandard.ZstdDecompressor().decompress(stored["postings"]))
    decode_archive(stored["batches"])  # the texts of the hits and their context come from here
    return _bm25(postings, lengths, query)


def fts5_per_search(tokenizer: str) -> Search:
    def search(stored: dict[str, bytes], query: str) -> list[int]:
        db = sqlite3.connect(":memory:")
        db.execute(f"CREATE VIRTUAL TABLE t USING fts5(terms, tokenize='{tokenizer}', content='')")
        db.executemany("INSERT INTO t (rowid, terms) VALUES (?, ?)",
                       ((i, " ".join(terms(m.text))) for i, m in enumerate(decode_archive(stored["batches"]))))
        expression = match_expression(query)
        rows = db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (expression, TOP)).fetchall()
        db.close()
        return [row[0] for row in rows]
    return search


def fts5_stored(stored: dict[str, bytes], query: str) -> list[int]:
    """The whole path a worker takes: load, rank, the results' texts and context (what it times)."""
    recall(SearchIndex.from_bytes(stored["index"]), query, max_tokens=400)
    return []


def fts5_stored_ranked(stored: dict[str, bytes], query: str) -> list[int]:
    """The same index's hits, for hit@k."""
    return SearchIndex.from_bytes(stored["index"]).rank(query, TOP)


def peers() -> dict[str, Search]:
    found: dict[str, Search] = {}
    try:
        import rank_bm25

        def rank_bm25_search(stored: dict[str, bytes], query: str) -> list[int]:
            corpus = [terms(m.text) or [""] for m in decode_archive(stored["batches"])]
            scores = rank_bm25.BM25Okapi(corpus, k1=K1, b=B).get_scores(terms(query))
            return [int(i) for i in scores.argsort()[::-1][:TOP]]
        found["rank_bm25, per search"] = rank_bm25_search
    except ImportError:
        print("rank_bm25 not installed: skipped (pip install -r bench/requirements-peers.txt)")
    try:
        import bm25s

        def bm25s_search(stored: dict[str, bytes], query: str) -> list[int]:
            corpus = [terms(m.text) or [""] for m in decode_archive(stored["batches"])]
            retriever = bm25s.BM25(k1=K1, b=B)
            retriever.index(corpus, show_progress=False)
            words = [t for t in terms(query) if t in retriever.vocab_dict] or [""]
            documents, _ = retriever.retrieve([words], k=TOP, show_progress=False, n_threads=1)
            return [int(i) for i in documents[0]]
        found["bm25s, per search"] = bm25s_search
    except ImportError:
        print("bm25s not installed: skipped (pip install -r bench/requirements-peers.txt)")
    return found


def store(messages: Sequence[ArchivedMessage]) -> dict[str, bytes]:
    postings = _postings(messages)
    return {"batches": encode_batch(messages),
            "postings": zstandard.ZstdCompressor(level=3).compress(marshal.dumps(postings)),
            "index": SearchIndex.of(messages).to_bytes()}


def hit(ranked: list[int], answer: int, k: int) -> bool:
    return any(p - 1 <= answer <= p + 2 for p in ranked[:k])


def measure(search: Search, stored: dict[str, bytes], queries: list[str]) -> tuple[float, float]:
    times: list[float] = []
    for query in queries:
        start = time.thread_time()
        search(stored, query)
        times.append((time.thread_time() - start) * 1000)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, math.ceil(len(times) * 0.99) - 1)]


def queries_for(facts: list[Fact], messages: Sequence[ArchivedMessage], count: int) -> list[str]:
    """The facts' questions, then players' own messages as queries (what `auto` recall searches with)."""
    players = [m.text for m in messages if m.speaker == "player"]
    out = [f.query for f in facts]
    out += players[:: max(1, len(players) // count)]
    return out[:count]


def bytes_per_message(messages: Sequence[ArchivedMessage]) -> None:
    import msgpack
    rows = msgpack.packb([[m.id, 0, m.text, 0] for m in messages])
    n = len(messages)
    average = sum(len(m.text.encode()) for m in messages) / n
    print(f"\nbytes per archived message ({n:,} messages; texts average {average:.0f} bytes), and decompressing them all:")
    zstd = zstandard.ZstdDecompressor()
    for name, packed, unpack in (
            ("msgpack rows, uncompressed", rows, bytes),
            ("zlib level 9", zlib.compress(rows, 9), zlib.decompress),
            ("lzma preset 9", lzma.compress(rows, preset=9), lzma.decompress),
            ("zstd level 9 (the archive's batches)", encode_batch(messages)[5:], zstd.decompress),
            ("FTS5 index with the texts, stored", SearchIndex.of(messages).to_bytes()[4:], zstd.decompress)):
        start = time.thread_time()
        unpack(packed)
        print(f"  {name:<40} {len(packed) / n:8.1f} B   {(time.thread_time() - start) * 1000:6.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--slow-searches", type=int, default=100, help="searches of the per-search engines at 10,000")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    engines: dict[str, Search] = {"hand BM25, per search (baseline)": hand_per_search,
                                  "hand BM25, stored postings": hand_stored, **peers(),
                                  "FTS5, per search": fts5_per_search("ascii"), "FTS5, stored (picked)": fts5_stored}
    for size in (1_000, 10_000):
        messages, facts = conversation(size, seed=1)
        stored = store(messages)
        print(f"\n{size:,} archived messages: CPU per search, whole path (ms)")
        baseline = 0.0
        for name, search in engines.items():
            slow = "per search" in name and size > 1_000
            p50, p99 = measure(search, stored, queries_for(facts, messages, args.slow_searches if slow else args.searches))
            baseline = baseline or p99
            print(f"  {name:<36} p50 {p50:8.2f}  p99 {p99:8.2f}  p99 x{p99 / baseline:6.3f} of the baseline")
    bytes_per_message(conversation(10_000, seed=1)[0])
    quality = {**engines, "FTS5 + Porter stemmer": fts5_per_search("porter ascii")}
    print(f"\nhit@k on planted facts, 10,000 messages, {args.seeds} conversations:")
    runs = [conversation(10_000, seed=seed) for seed in range(1, args.seeds + 1)]
    stores = [store(messages) for messages, _ in runs]
    for name, search in quality.items():
        counts: Counter[tuple[str, int]] = Counter()
        total: Counter[str] = Counter()
        for (messages, facts), stored in zip(runs, stores, strict=True):
            position = {m.id: i for i, m in enumerate(messages)}
            for fact in facts:
                ranked = (fts5_stored_ranked if search is fts5_stored else search)(stored, fact.query)
                total[fact.kind] += 1
                for k in (1, 3, 5):
                    counts[(fact.kind, k)] += hit(ranked, position[fact.evidence_ids[-1]], k)
        line = "  ".join(f"@{k} {sum(counts[(kind, k)] for kind in total) / sum(total.values()):.0%}" for k in (1, 3, 5))
        misses = [f"{kind} {counts[(kind, 1)]}/{n}" for kind, n in total.items() if counts[(kind, 1)] < n]
        print(f"  {name:<36} {line}   @1 misses: {', '.join(misses) or 'none'}")


if __name__ == "__main__":
    main()
