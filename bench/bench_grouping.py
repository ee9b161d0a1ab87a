"""How well failure groups match causes, and what a key costs: the labelled corpus of
tests/error_corpus.py grouped by the rules of the first release, by ingest/grouping.py, and by the
drain3 log-template miner (when it is installed; it is not a dependency).

    python bench/bench_grouping.py                 # the table docs/grouping.md shows
    python bench/bench_grouping.py --seed 3 --sim 0.4 0.5 0.6 0.7

For each approach: groups found, causes split (spread over more than one group), groups that
merge causes, pairwise precision and recall (of the pairs of messages put together, how many
share a cause; of the pairs that share a cause, how many were put together), the adjusted Rand
index, and the time per key: cold (every text new, caches cleared) and warm (texts seen before).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter, defaultdict
from functools import lru_cache
from math import comb
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlq_dashboard.ingest import grouping  # noqa: E402
from tests.error_corpus import CAUSES, samples  # noqa: E402

# --- the first release's rules (GROUPING_VERSION 1), kept here to measure what changed ---------

_V1_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_V1_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{12,}\b")
_V1_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_V1_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_V1_DIGITS_IN_WORD = re.compile(r"(?<=[A-Za-z_-])\d{3,}\b")
_V1_SPACES = re.compile(r"\s+")
_V1_LEADING_VALUE = re.compile(
    r"^(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None|"
    r"true|false|null|\{.*\}|\[.*\])\s+(?=(?:is|are|does|should|has|was|must|cannot)\b)", re.DOTALL)


@lru_cache(maxsize=65536)
def _v1_text(text: str) -> str:
    text = _V1_UUID.sub("<id>", text)
    text = _V1_HEX_ID.sub("<id>", text)
    text = _V1_QUOTED.sub("'…'", text)
    text = _V1_DIGITS_IN_WORD.sub("<n>", text)
    text = _V1_NUMBER.sub("<n>", text)
    return _V1_SPACES.sub(" ", text).strip()[:300]


def v1_key(error: str | None, schema_errors: list | None) -> str:
    """The group key as the first release computed it."""
    if schema_errors:
        parts = []
        for item in schema_errors:
            message = _V1_SPACES.sub(" ", str(item.get("message", ""))).strip()
            if not message.endswith("is a required property"):
                message = _V1_LEADING_VALUE.sub("… ", message)
            parts.append(f"{item.get('path') or '(root)'}: {message[:300]}")
        return "; ".join(sorted(set(parts)))[:300]
    return _v1_text(error) if error and error.strip() else "(no error text)"


def clear_caches() -> None:
    for name in dir(grouping):
        cached = getattr(grouping, name)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    _v1_text.cache_clear()


# --- drain3 ----------------------------------------------------------------------------------------

# Masks for what a dead letter's error carries, in drain3's own format: the values it should not
# treat as words. Drain's "<*>" does the rest.
DRAIN_MASKS = [
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "UUID"),
    (r"[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+", "EMAIL"),
    (r"\b\d{4}-\d\d-\d\d(?:T\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?)?", "TIME"),
    (r"\[[0-9a-fA-F:]+\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", "IP"),
    (r"\b0x[0-9a-fA-F]+\b", "HEX"),
    (r"\b(?=\w*\d)(?=\w*[A-Za-z])[A-Za-z0-9_-]{6,}\b", "ID"),
    (r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:ms|s)?\b", "NUM"),
]


def drain_groups(texts: list[str], sim: float) -> tuple[list[int], float]:
    """Cluster ids as drain3 assigns them in arrival order (what a mirror would store), and the
    seconds it took."""
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.drain_sim_th = sim
    config.profiling_enabled = False
    config.masking_instructions = [MaskingInstruction(pattern, name) for pattern, name in DRAIN_MASKS]
    miner = TemplateMiner(config=config)
    started = time.process_time()
    ids = [miner.add_log_message(text)["cluster_id"] for text in texts]
    return ids, time.process_time() - started


def as_text(error: str | None, schema_errors: list | None) -> str:
    """What drain3 reads: the error text, or the schema errors as "path: message" lines."""
    if schema_errors:
        return "; ".join(f"{item['path']}: {item['message']}" for item in schema_errors)
    return error or ""


# --- scores --------------------------------------------------------------------------------------

def scores(causes: list[str], groups: list) -> dict:
    """Groups, splits, merges, pairwise precision and recall, adjusted Rand index."""
    per_cause: dict = defaultdict(set)
    per_group: dict = defaultdict(set)
    for cause, group in zip(causes, groups):
        per_cause[cause].add(group)
        per_group[group].add(cause)
    together = sum(comb(n, 2) for n in Counter(zip(causes, groups)).values())
    same_group = sum(comb(n, 2) for n in Counter(groups).values())
    same_cause = sum(comb(n, 2) for n in Counter(causes).values())
    total = comb(len(causes), 2)
    expected = same_group * same_cause / total
    ari = (together - expected) / ((same_group + same_cause) / 2 - expected)
    return {"groups": len(per_group), "split": sum(len(g) > 1 for g in per_cause.values()),
            "merged": sum(len(c) > 1 for c in per_group.values()),
            "precision": together / same_group if same_group else 1.0,
            "recall": together / same_cause if same_cause else 1.0, "ari": ari}


def time_keys(key, corpus, runs: int = 5) -> tuple[float, float]:
    """Microseconds per key: every text new (caches cleared), then every text seen before; the
    best of ``runs`` (the machine is shared: the best run is the one least disturbed)."""
    cold, warm = [], []
    for _ in range(runs):
        clear_caches()
        started = time.process_time()
        for _, error, schema_errors in corpus:
            key(error, schema_errors)
        cold.append(time.process_time() - started)
        started = time.process_time()
        for _, error, schema_errors in corpus:
            key(error, schema_errors)
        warm.append(time.process_time() - started)
    return min(cold) / len(corpus) * 1e6, min(warm) / len(corpus) * 1e6


def row(name: str, s: dict, cold: float, warm: float | None) -> str:
    warm_text = f"{warm:.1f}" if warm is not None else "–"
    return (f"| {name} | {s['groups']} | {s['split']} | {s['merged']} | {s['precision']:.3f} | {s['recall']:.3f} "
            f"| {s['ari']:.3f} | {cold:.1f} | {warm_text} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--sim", type=float, nargs="*", default=[0.4], help="drain3 similarity thresholds")
    args = parser.parse_args()
    corpus = samples(args.seed)
    causes = [cause for cause, _, _ in corpus]
    print(f"{len(CAUSES)} causes, {len(corpus)} messages (seed {args.seed})\n")
    print("| approach | groups | causes split | groups merging causes | pairwise precision | pairwise recall "
          "| ARI | µs/key cold | µs/key warm |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, key in (("rules of the first release (v1)", v1_key),
                      (f"rules of ingest/grouping.py (v{grouping.GROUPING_VERSION})", grouping.group_key)):
        cold, warm = time_keys(key, corpus)
        clear_caches()
        print(row(name, scores(causes, [key(e, s) for _, e, s in corpus]), cold, warm))
    try:
        import drain3  # noqa: F401
    except ImportError:
        print("\ndrain3 is not installed (pip install drain3): its rows are skipped.")
        return
    texts = [as_text(e, s) for _, e, s in corpus]
    for sim in args.sim:
        ids, seconds = drain_groups(texts, sim)
        print(row(f"drain3 0.9, sim_th {sim}, masks above", scores(causes, ids), seconds / len(texts) * 1e6, None))


if __name__ == "__main__":
    main()
