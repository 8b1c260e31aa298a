"""CPython's own mapping tests (``test.mapping_tests.TestMappingProtocol``, the suite dict and
UserDict pass), run against SoftDict: the mapping contract checked by a suite we did not write.

SoftDict is a ``MutableMapping[str, V]``: its keys are text, and its keyword arguments are its
options. The few tests that insert int keys, or give items as keyword arguments, are adapted
below, each with its reason; everything else runs as CPython wrote it.
"""

from __future__ import annotations

from _support import FakeEncoder
from test import mapping_tests

from softdict import SoftDict


class FakeSoftDict(SoftDict):
    """SoftDict on the seeded fake encoder, so the suite needs no model."""

    def __init__(self, data=None, /, **options) -> None:  # type: ignore[no-untyped-def]
        options.setdefault("encoder", FakeEncoder())
        super().__init__(data, **options)


class TestSoftDictMappingProtocol(mapping_tests.TestMappingProtocol):
    type2test = FakeSoftDict

    def _reference(self) -> dict[str, str]:
        # CPython's reference holds a tuple, which a label store keeps as JSON (a list): values
        # must be "invariant by storage", so every value here is text.
        return {"1": "2", "key1": "value1", "key2": "value2"}

    # -- adapted: int keys become str keys (SoftDict keys are text) ------------------------------

    def test_clear(self) -> None:
        d = self._full_mapping({"1": 1, "2": 2, "3": 3})
        d.clear()
        self.assertEqual(d, {})
        self.assertRaises(TypeError, d.clear, None)

    def test_values(self) -> None:
        mapping_tests.BasicTestMappingProtocol.test_values(self)
        d = self._full_mapping({"1": 2})
        self.assertEqual(list(d.values()), [2])

    def test_items(self) -> None:
        mapping_tests.BasicTestMappingProtocol.test_items(self)
        d = self._full_mapping({"1": 2})
        self.assertEqual(list(d.items()), [("1", 2)])

    def test_copy(self) -> None:
        d = self._full_mapping({"1": 1, "2": 2, "3": 3})
        self.assertEqual(d.copy(), {"1": 1, "2": 2, "3": 3})
        d = self._empty_mapping()
        self.assertEqual(d.copy(), d)
        self.assertIsInstance(d.copy(), d.__class__)
        self.assertRaises(TypeError, d.copy, None)

    def test_update(self) -> None:
        mapping_tests.BasicTestMappingProtocol.test_update(self)
        d = self._empty_mapping()
        d.update({"1": 100})
        d.update({"2": 20})
        d.update({"1": 1, "2": 2, "3": 3})
        self.assertEqual(d, {"1": 1, "2": 2, "3": 3})
        d.update()
        self.assertEqual(d, {"1": 1, "2": 2, "3": 3})
        d = self._empty_mapping()
        d.update(x=100)
        d.update(y=20)
        d.update(x=1, y=2, z=3)
        self.assertEqual(d, {"x": 1, "y": 2, "z": 3})
        d = self._empty_mapping()
        d.update([("x", 100), ("y", 20)])
        self.assertEqual(d, {"x": 100, "y": 20})
        d = self._empty_mapping()
        d.update([("x", 100), ("y", 20)], x=1, y=2)
        self.assertEqual(d, {"x": 1, "y": 2})
        d = self._full_mapping({"1": 3, "2": 4})
        d.update(self._full_mapping({"1": 2, "3": 4, "5": 6}).items())
        self.assertEqual(d, {"1": 2, "2": 4, "3": 4, "5": 6})

        class SimpleUserDict:
            def __init__(self) -> None:
                self.d = {"1": 1, "2": 2, "3": 3}

            def keys(self):  # type: ignore[no-untyped-def]
                return self.d.keys()

            def __getitem__(self, i):  # type: ignore[no-untyped-def]
                return self.d[i]

        d.clear()
        d.update(SimpleUserDict())
        self.assertEqual(d, {"1": 1, "2": 2, "3": 3})

    # -- adapted: SoftDict's own design --------------------------------------------------------

    def test_constructor(self) -> None:
        """SoftDict's keyword arguments are its options, so items cannot be keywords: they come
        as a mapping, and an unknown keyword is an error, not an item."""
        mapping_tests.BasicTestMappingProtocol.test_constructor(self)
        self.assertTrue(self._empty_mapping() is not self._empty_mapping())
        self.assertEqual(self.type2test({"x": 1, "y": 2}), {"x": 1, "y": 2})
        self.assertRaises(TypeError, self.type2test, x=1)

    def test_setdefault(self) -> None:
        """A label is stored as JSON, so ``sd[key]`` (and setdefault) return a fresh copy:
        appending to it does not change the store, where a dict would share the list."""
        mapping_tests.BasicTestMappingProtocol.test_setdefault(self)
        d = self._empty_mapping()
        self.assertTrue(d.setdefault("key0") is None)
        d.setdefault("key0", [])
        self.assertTrue(d.setdefault("key0") is None)
        d.setdefault("key", []).append("a")
        self.assertEqual(d["key"], [])  # a dict would hold ["a"]
        d["key"] = ["a"]
        d.setdefault("key", []).append("b")
        self.assertEqual(d["key"], ["a"])

    def test_fromkeys(self) -> None:
        """As CPython's, with str keys."""
        self.assertEqual(self.type2test.fromkeys("abc"), {"a": None, "b": None, "c": None})
        d = self._empty_mapping()
        self.assertTrue(d.fromkeys("abc") is not d)
        self.assertEqual(d.fromkeys("abc"), {"a": None, "b": None, "c": None})
        self.assertEqual(d.fromkeys(("4", "5"), 0), {"4": 0, "5": 0})
        self.assertEqual(d.fromkeys([]), {})

        def g():  # type: ignore[no-untyped-def]
            yield "1"

        self.assertEqual(d.fromkeys(g()), {"1": None})
        self.assertRaises(TypeError, d.fromkeys, 3)

        class dictlike(self.type2test):  # type: ignore[name-defined,misc]
            pass

        self.assertEqual(dictlike.fromkeys("a"), {"a": None})
        self.assertTrue(type(dictlike().fromkeys("a")) is dictlike)

        class Exc(Exception):
            pass

        class baddict1(self.type2test):  # type: ignore[name-defined,misc]
            def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
                raise Exc()

        self.assertRaises(Exc, baddict1.fromkeys, ["1"])

        class BadSeq:
            def __iter__(self):  # type: ignore[no-untyped-def]
                return self

            def __next__(self):  # type: ignore[no-untyped-def]
                raise Exc()

        self.assertRaises(Exc, self.type2test.fromkeys, BadSeq())

        class baddict2(self.type2test):  # type: ignore[name-defined,misc]
            def __setitem__(self, key, value):  # type: ignore[no-untyped-def]
                raise Exc()

        self.assertRaises(Exc, baddict2.fromkeys, ["1"])
