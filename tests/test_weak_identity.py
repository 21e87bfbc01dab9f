"""`WeakIdentityMap`: lookups by identity, and an entry gone with its key, before the key's id can be reused."""

from __future__ import annotations

import gc

from v1._util.weak_identity import WeakIdentityMap


class Key:
    """Equal to every other key: the map must still tell them apart."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key)

    def __hash__(self) -> int:
        return 0


def test_equal_keys_are_different_entries() -> None:
    first, second = Key(), Key()
    mapping: WeakIdentityMap[Key, str] = WeakIdentityMap()
    mapping[first] = "first"
    assert mapping.get(second) is None
    mapping[second] = "second"
    assert (mapping.get(first), mapping.get(second), len(mapping)) == ("first", "second", 2)


def test_an_entry_goes_with_its_key_and_a_new_object_at_the_same_address_finds_nothing() -> None:
    mapping: WeakIdentityMap[Key, int] = WeakIdentityMap()
    for round_ in range(200):  # CPython reuses a freed object's memory at once: new keys land on old ids
        key = Key()
        assert mapping.get(key) is None, f"round {round_}: a collected key's value reached a new object"
        mapping[key] = round_
        assert mapping.get(key) == round_
        del key
    gc.collect()
    assert len(mapping) == 0


def test_pop_and_store_again_keep_one_live_entry() -> None:
    mapping: WeakIdentityMap[Key, int] = WeakIdentityMap()
    key = Key()
    mapping[key] = 1
    assert mapping.pop(key) == 1 and mapping.pop(key) is None
    mapping[key] = 2
    mapping[key] = 3
    assert (mapping.get(key), len(mapping)) == (3, 1)
    del key
    assert len(mapping) == 0


def test_a_collected_map_leaves_its_keys_callbacks_harmless() -> None:
    key = Key()
    mapping: WeakIdentityMap[Key, int] = WeakIdentityMap()
    mapping[key] = 1
    del mapping
    gc.collect()
    del key  # the key's weak reference calls back into a map that is gone: nothing raises


def test_one_key_in_many_maps_leaves_each_and_a_collected_map_is_no_trouble() -> None:
    maps: list[WeakIdentityMap[Key, int]] = [WeakIdentityMap() for _ in range(3)]
    keys = [Key() for _ in range(50)]
    for mapping in maps:
        for number in range(len(keys)):
            mapping[keys[number]] = number
    gone = maps.pop()  # a map collected while its keys live: their callbacks later find no map
    del gone
    gc.collect()
    assert all(mapping.get(keys[7]) == 7 for mapping in maps)
    assert maps[0].pop(keys[0]) == 0
    del keys[:25]
    assert [len(mapping) for mapping in maps] == [25, 25]
    keys.clear()
    assert [len(mapping) for mapping in maps] == [0, 0]
    assert [len(mapping._idents) for mapping in maps] == [0, 0]
