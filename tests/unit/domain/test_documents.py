"""Document limits (`functions/domain/documents.py`): depth and node counts at their edges,
aliases counted as what they expand to. Expected values are written out."""

from __future__ import annotations

import pytest

from functions.domain.documents import (
    MAX_DEPTH,
    MAX_JOB_FILE_BYTES,
    MAX_NODES,
    DocumentTooComplex,
    check_depth,
    check_yaml,
    load_yaml,
)


def test_the_limits_are_the_documented_ones() -> None:
    assert (MAX_DEPTH, MAX_NODES, MAX_JOB_FILE_BYTES) == (32, 10_000, 1_048_576)


def nested_list(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(("levels", "refused"), [(1, False), (32, False), (33, True)])
def test_yaml_depth_edge(levels: int, refused: bool) -> None:
    text = nested_list(levels)
    if refused:
        with pytest.raises(DocumentTooComplex, match="deeper than 32"):
            check_yaml(text)
    else:
        check_yaml(text)


def test_a_mapping_counts_as_a_level() -> None:
    check_yaml("a: " + nested_list(31))  # the mapping, then 31 lists
    with pytest.raises(DocumentTooComplex):
        check_yaml("a: " + nested_list(32))


def flat(values: int) -> str:
    """A list of `values - 1` scalars: `values` nodes with the list itself."""
    return "[" + ", ".join(["1"] * (values - 1)) + "]"


def test_yaml_node_edge() -> None:
    check_yaml(flat(10_000))
    with pytest.raises(DocumentTooComplex, match="more than 10000 values"):
        check_yaml(flat(10_001))


def test_an_alias_counts_as_the_node_it_repeats() -> None:
    # `a` is a list of 99 scalars: 100 nodes. The top mapping has key a, the list (100), then
    # 99 keys each with an alias of 100 nodes: 1 + 1 + 100 + 99 * (1 + 100) = 10_101.
    body = "a: &a " + flat(100) + "\n" + "".join(f"k{i}: *a\n" for i in range(99))
    with pytest.raises(DocumentTooComplex, match="more than 10000"):
        check_yaml(body)
    # 97 aliases: 1 + 1 + 100 + 97 * 101 = 9_899
    check_yaml("a: &a " + flat(100) + "\n" + "".join(f"k{i}: *a\n" for i in range(97)))


def test_an_alias_adds_the_height_of_its_target() -> None:
    # target: 20 levels; used inside 12 open levels (mapping + 11 lists): 32, then 33
    target = "x: &t " + nested_list(20) + "\n"
    check_yaml(target + "y: " + "[" * 11 + "*t" + "]" * 11 + "\n")
    with pytest.raises(DocumentTooComplex, match="deeper than 32"):
        check_yaml(target + "y: " + "[" * 12 + "*t" + "]" * 12 + "\n")


def test_an_alias_to_an_open_collection_is_a_cycle() -> None:
    with pytest.raises(DocumentTooComplex, match="refers to itself"):
        check_yaml("a: &a [1, *a]")


def test_load_yaml_returns_what_safe_load_does() -> None:
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(("levels", "refused"), [(0, False), (32, False), (33, True)])
def test_json_depth_edge(levels: int, refused: bool) -> None:
    value: object = 1
    for _ in range(levels):
        value = [value]
    if refused:
        with pytest.raises(DocumentTooComplex, match="deeper than 32"):
            check_depth(value)
    else:
        check_depth(value)


def test_json_depth_counts_objects_and_lists() -> None:
    value: object = {"a": 1}
    for _ in range(31):
        value = {"k": value}
    check_depth(value)  # 32 objects
    with pytest.raises(DocumentTooComplex):
        check_depth({"outer": value})
