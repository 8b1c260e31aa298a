"""Threads: lookups run while other threads insert and delete; no crash, no torn result."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _support import FakeEncoder, close

from softdict import SoftDict, ValueKindError

MAIN = [f"main key {i}" for i in range(40)]


@pytest.mark.parametrize("index", ["auto", "hnsw", "ivf"])
def test_lookups_never_see_half_a_write(index: str) -> None:
    """One writer sets every main key to the same generation g in one update, so a lookup over
    the main keys must return exactly some g: a torn read would blend two generations. Another
    writer inserts and deletes other keys meanwhile, growing and compacting the index."""
    sd = SoftDict({key: 0.0 for key in MAIN}, encoder=FakeEncoder(), index=index, temperature=0.5)
    sd.update({f"churn {i}": 0.0 for i in range(2500)})  # enough keys to build FAISS indexes
    errors: list[BaseException] = []
    seen: list[float] = []
    last_generation = [0]
    readers_done = threading.Event()  # the writers keep writing until every reader is done

    def guarded(work):
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # surfaced by the main thread's assert
                errors.append(exc)

        return run

    def generations() -> None:
        for g in range(1, 20_000):
            sd.update({key: float(g) for key in MAIN})
            last_generation[0] = g
            if readers_done.is_set():
                break

    def churn() -> None:
        rng = np.random.default_rng(1)
        i = 0
        while not readers_done.is_set() and i < 20_000:
            key = f"churn {int(rng.integers(0, 4000))}"
            if key in sd:
                sd.pop(key, None)
            else:
                sd[key] = 0.0
            i += 1

    def read() -> None:
        for n in range(60):
            value = sd.lookup("main key 3", mask=MAIN)
            seen.append(value)
            assert abs(value - round(value)) < 1e-9, f"torn read: {value}"
            attention = sd.attend(f"key {n}")
            # An estimated attention's head holds 1 - tail_mass; its sample the rest.
            assert attention.weights.sum() + (attention.tail_mass or 0.0) == close(1.0)
            assert len(set(attention.keys)) == len(attention.keys)
            assert len(list(sd)) >= len(MAIN)

    writers = [threading.Thread(target=guarded(w)) for w in (generations, churn)]
    readers = [threading.Thread(target=guarded(read)) for _ in range(3)]
    threads = writers + readers
    for thread in threads:
        thread.start()
    for thread in readers:
        thread.join(timeout=120)
    readers_done.set()
    for thread in writers:
        thread.join(timeout=120)
    assert not errors, errors[0]
    assert not any(thread.is_alive() for thread in threads)
    assert sd.lookup("main key 3", mask=MAIN) == close(last_generation[0])
    assert len(set(np.round(seen))) > 1  # the readers really ran during the writes


def test_concurrent_inserts_of_different_kinds_into_an_empty_store() -> None:
    """Two threads race to fix the kind; one wins, the other gets an error, nothing is mixed."""
    for _ in range(20):
        sd = SoftDict(encoder=FakeEncoder())
        outcomes: list[str] = []

        def insert(values: dict, sd: SoftDict = sd, outcomes: list[str] = outcomes) -> None:
            try:
                sd.update(values)
                outcomes.append("ok")
            except ValueKindError:
                outcomes.append("refused")

        a = threading.Thread(target=insert, args=({f"a{i}": float(i) for i in range(50)},))
        b = threading.Thread(target=insert, args=({f"b{i}": f"label {i}" for i in range(50)},))
        a.start(), b.start(), a.join(), b.join()
        assert sorted(outcomes) == ["ok", "refused"]
        assert len(sd) == 50 and len({type(sd[k]) for k in sd}) == 1


def test_items_and_values_skip_keys_another_thread_deletes() -> None:
    """items() and values() walk a snapshot of the keys, as iterating the store does, and skip
    a key deleted since: the mixin's views fetched it and raised KeyError for a key the caller
    never named. Every item seen is one the store held."""
    sd = SoftDict({f"k{i}": float(i) for i in range(300)}, encoder=FakeEncoder())
    errors: list[BaseException] = []
    done = threading.Event()

    def delete() -> None:
        for i in range(300):
            sd.pop(f"k{i}", None)
        done.set()

    def read() -> None:
        try:
            while not done.is_set():
                for key, value in sd.items():
                    assert value == float(key[1:])
                sum(sd.values())
        except BaseException as exc:  # reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in readers:
        thread.start()
    delete()
    for thread in readers:
        thread.join()
    assert not errors, errors[0]
    assert list(sd.items()) == [] and list(sd.values()) == []


def test_a_save_fingerprints_its_encoder_without_holding_up_lookups(tmp_path) -> None:
    """``save`` and pickling encode a probe text to fingerprint the encoder, which a slow
    encoder makes slow: done under the store's lock, every lookup waited for it. Here the
    encoder, while it fingerprints, has another thread read the store: it must not wait."""
    read: list[object] = []

    class ReadsWhileFingerprinting(FakeEncoder):
        saving = False

        def encode(self, texts: list[str]) -> np.ndarray:
            if self.saving:
                reader = threading.Thread(target=lambda: read.append(sd["apple"]), daemon=True)
                reader.start()
                reader.join(timeout=30)  # joined at once, unless the store's lock is held
                read.append(reader.is_alive())
            return super().encode(texts)

    encoder = ReadsWhileFingerprinting()
    sd = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=encoder)
    encoder.saving = True
    sd.save(tmp_path / "s")
    assert read[:2] == [1.0, False]  # the read came back, and the reader did not wait
