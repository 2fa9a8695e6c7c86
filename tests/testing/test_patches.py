"""The patch engines against the RFCs' own examples, plus properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhami.testing.fake_apiserver.patches import (
    PatchApplyError,
    PatchFormatError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

# RFC 7386 appendix A, a selection.
MERGE_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "want"), MERGE_CASES)
def test_merge_patch_rfc7386_examples(target, patch, want) -> None:
    assert merge_patch(target, patch) == want


# RFC 6902 appendix A, a selection.
JSON_CASES = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    (
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    (
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    (
        {"foo": "bar"},
        [{"op": "copy", "from": "/foo", "path": "/baz"}],
        {"foo": "bar", "baz": "bar"},
    ),
]


@pytest.mark.parametrize(("target", "patch", "want"), JSON_CASES)
def test_json_patch_rfc6902_examples(target, patch, want) -> None:
    assert json_patch(target, patch) == want


@pytest.mark.parametrize(
    ("target", "patch", "error"),
    [
        pytest.param(
            {"baz": "qux"},
            [{"op": "test", "path": "/baz", "value": "bar"}],
            PatchApplyError,
            id="test-fails",
        ),
        pytest.param(
            {"foo": "bar"},
            [{"op": "add", "path": "/baz/bat", "value": "qux"}],
            PatchApplyError,
            id="add-to-missing-parent",
        ),
        pytest.param(
            {"a": [1]}, [{"op": "remove", "path": "/a/5"}], PatchApplyError, id="index-out-of-range"
        ),
        pytest.param(
            {"a": [1]},
            [{"op": "replace", "path": "/b", "value": 1}],
            PatchApplyError,
            id="replace-missing",
        ),
        pytest.param({}, {"op": "add"}, PatchFormatError, id="not-a-list"),
        pytest.param({}, [{"op": "frob", "path": "/a"}], PatchFormatError, id="unknown-op"),
        pytest.param(
            {}, [{"op": "add", "path": "a", "value": 1}], PatchFormatError, id="bad-pointer"
        ),
        pytest.param({}, [{"op": "add", "path": "/a"}], PatchFormatError, id="no-value"),
    ],
)
def test_json_patch_refuses(target, patch, error) -> None:
    with pytest.raises(error):
        json_patch(target, patch)


def test_json_patch_is_all_or_nothing() -> None:
    target = {"a": 1}
    with pytest.raises(PatchApplyError):
        json_patch(
            target, [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/missing"}]
        )
    assert target == {"a": 1}


def test_strategic_merge_lists_and_directives() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "1"},
            ],
            "tolerations": [{"key": "t1"}],
        },
        "metadata": {"finalizers": ["f1"], "labels": {"k": "v", "drop": "x"}},
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "env": [{"name": "Y", "value": "2"}, {"name": "X", "$patch": "delete"}],
                },
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "3"},
            ],
            "tolerations": [{"key": "t2"}],  # no merge key: replaced
            "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
        },
        "metadata": {"finalizers": ["f2"], "labels": {"drop": None}},
    }
    result = strategic_merge_patch(pod, patch)
    assert result["spec"]["containers"] == [
        {"name": "a", "image": "1", "env": [{"name": "Y", "value": "2"}]},
        {"name": "c", "image": "3"},
    ]
    assert result["spec"]["tolerations"] == [{"key": "t2"}]
    assert result["metadata"] == {"finalizers": ["f1", "f2"], "labels": {"k": "v"}}
    assert "$setElementOrder/containers" not in result["spec"]
    assert pod["spec"]["containers"][1]["name"] == "b"  # input untouched


def test_strategic_replace_and_delete_maps_and_primitive_deletes() -> None:
    obj = {
        "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]},
        "spec": {"nodeSelector": {"z": "1"}},
    }
    patch = {
        "metadata": {
            "labels": {"$patch": "replace", "c": "3"},
            "$deleteFromPrimitiveList/finalizers": ["x"],
        },
        "spec": {"nodeSelector": {"$patch": "delete"}},
    }
    assert strategic_merge_patch(obj, patch) == {
        "metadata": {"labels": {"c": "3"}, "finalizers": ["y"]},
        "spec": {},
    }


def test_strategic_merge_needs_merge_keys() -> None:
    with pytest.raises(PatchApplyError, match="merge key"):
        strategic_merge_patch({"spec": {"containers": []}}, {"spec": {"containers": [{"x": 1}]}})
    with pytest.raises(PatchFormatError):
        strategic_merge_patch({}, [1])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


@settings(max_examples=60, deadline=None)
@given(json_objects, json_objects)
def test_merge_patch_is_idempotent(target, patch) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


@settings(max_examples=60, deadline=None)
@given(json_objects, json_objects)
def test_merge_patch_with_the_result_itself_gives_the_result(target, patch) -> None:
    """A merge patch equal to a null-free document turns any object into that document's
    keys (RFC 7386: the patch describes the result)."""
    desired = _without_nulls(patch)
    result = merge_patch(target, desired)
    for key, value in desired.items():
        if not isinstance(value, dict):
            assert result[key] == value
