"""Device string grammar, canonical form, merge/fill laws, matching and errors."""

from __future__ import annotations

import dataclasses
import pickle
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.devices import ANY, DeviceSpec, canonical_device
from orchestrator.errors import DeviceSpecError

P = DeviceSpec.parse

PARSE_TABLE: list[tuple[str, DeviceSpec, str]] = [
    ("/cpu:0", DeviceSpec(device_type="CPU", device_index=0), "/device:CPU:0"),
    ("/CPU:0", DeviceSpec(device_type="CPU", device_index=0), "/device:CPU:0"),
    ("/gpu:1", DeviceSpec(device_type="GPU", device_index=1), "/device:GPU:1"),
    ("/device:GPU:1", DeviceSpec(device_type="GPU", device_index=1), "/device:GPU:1"),
    ("/device:gpu:1", DeviceSpec(device_type="GPU", device_index=1), "/device:GPU:1"),
    ("GPU:1", DeviceSpec(device_type="GPU", device_index=1), "/device:GPU:1"),
    ("/job:ps/task:0/cpu:0", DeviceSpec("ps", None, 0, "CPU", 0), "/job:ps/task:0/device:CPU:0"),
    (
        "/job:localhost/replica:0/task:0/device:GPU:1",
        DeviceSpec("localhost", 0, 0, "GPU", 1),
        "/job:localhost/replica:0/task:0/device:GPU:1",
    ),
    ("/gpu:*", DeviceSpec(device_type="GPU", device_index=ANY), "/device:GPU:*"),
    ("/job:worker", DeviceSpec(job="worker"), "/job:worker"),
    ("/task:1", DeviceSpec(task=1), "/task:1"),
    ("/device:GPU", DeviceSpec(device_type="GPU"), "/device:GPU"),
    ("/gpu", DeviceSpec(device_type="GPU"), "/device:GPU"),
    ("/device:CPU:*", DeviceSpec(device_type="CPU", device_index=ANY), "/device:CPU:*"),
    ("", DeviceSpec(), ""),
    ("   ", DeviceSpec(), ""),
    ("/job:ps/task:0", DeviceSpec(job="ps", task=0), "/job:ps/task:0"),
    ("  /job:my-job_2/replica:3  ", DeviceSpec(job="my-job_2", replica=3), "/job:my-job_2/replica:3"),
    ("/cpu:0/job:ps/task:10", DeviceSpec("ps", None, 10, "CPU", 0), "/job:ps/task:10/device:CPU:0"),
]


@pytest.mark.parametrize(("text", "spec", "canonical"), PARSE_TABLE)
def test_parse_and_canonical_form(text: str, spec: DeviceSpec, canonical: str) -> None:
    assert P(text) == spec
    assert spec.to_string() == str(spec) == canonical
    assert P(canonical) == spec


# --- hypothesis: round trip and merge laws ---------------------------------------------

jobs = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True)
counts = st.integers(min_value=0, max_value=20)


@st.composite
def specs(draw: st.DrawFn) -> DeviceSpec:
    device_type = draw(st.none() | st.sampled_from(["CPU", "GPU"]))
    index = None if device_type is None else draw(st.none() | st.just(ANY) | counts)
    return DeviceSpec(
        draw(st.none() | jobs), draw(st.none() | counts), draw(st.none() | counts), device_type, index
    )


@given(specs())
def test_round_trip(s: DeviceSpec) -> None:
    assert P(s.to_string()) == s
    assert P(s.to_string().lower() if s.job is None else s.to_string()) == s
    assert sorted(s.set_fields() + s.unset_fields()) == sorted(f.name for f in dataclasses.fields(s) if f.init)
    lower = None if s.device_type is None else s.device_type.lower()
    assert DeviceSpec(s.job, s.replica, s.task, lower, s.device_index) == s  # TF: device_type="gpu" is GPU
    assert P(DeviceSpec(s.job, s.replica, s.task, lower, s.device_index).to_string()) == s


@given(specs())
def test_merge_with_empty_is_identity(s: DeviceSpec) -> None:
    assert s.merge(DeviceSpec()) == s == DeviceSpec().merge(s)
    assert s.fill(DeviceSpec()) == s == DeviceSpec().fill(s)


@given(specs(), specs(), specs())
def test_merge_is_associative(a: DeviceSpec, b: DeviceSpec, c: DeviceSpec) -> None:
    # field by field (TF's make_merged_spec), so the order of folding scopes never matters
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(specs(), specs())
def test_merge_and_fill_laws(a: DeviceSpec, b: DeviceSpec) -> None:
    merged = a.merge(b)
    assert merged.fill(a) == merged
    assert a.fill(b) == b.merge(a)
    assert set(merged.set_fields()) == set(a.set_fields()) | set(b.set_fields())
    for name in ("job", "replica", "task", "device_type", "device_index"):  # TF's _get_combined_properties
        inner, outer = getattr(b, name), getattr(a, name)
        assert getattr(merged, name) == (inner if inner is not None else outer)


# --- merge / fill examples -----------------------------------------------------------------


def test_merge_nested_scopes_like_tensorflow() -> None:
    merged = P("/job:worker").merge(P("/gpu:1")).merge(P("/task:1"))
    assert merged == P("/job:worker/task:1/device:GPU:1")


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        ("/gpu:1", "/device:CPU", "/device:CPU:1"),  # TF: the index is its own field, kept across a type change
        ("/gpu:1", "/cpu", "/device:CPU:1"),
        ("/cpu:0", "/device:GPU", "/device:GPU:0"),
        ("/gpu:1", "/device:GPU", "/device:GPU:1"),  # same type keeps it
        ("/gpu:1", "/cpu:0", "/device:CPU:0"),
        ("/gpu:1", "/gpu:*", "/device:GPU:*"),  # '*' is an index here (TF would read it as none: GPU:1)
        ("/gpu:*", "/gpu:1", "/device:GPU:1"),
        ("/gpu:*", "/cpu", "/device:CPU:*"),
        ("/job:ps/task:0/gpu:0", "/job:worker", "/job:worker/task:0/device:GPU:0"),
        ("/job:ps/replica:1", "/task:2/cpu:3", "/job:ps/replica:1/task:2/device:CPU:3"),
    ],
)
def test_merge_examples(outer: str, inner: str, expected: str) -> None:
    assert P(outer).merge(P(inner)).to_string() == expected


def test_fill_takes_only_unset_fields() -> None:
    defaults = canonical_device("localhost", 0, "cpu", 0)
    assert P("/gpu:1").fill(defaults) == P("/job:localhost/replica:0/task:0/device:GPU:1")
    assert P("/job:ps").fill(defaults) == P("/job:ps/replica:0/task:0/device:CPU:0")
    assert P("/device:GPU").fill(P("/gpu:3")) == P("/device:GPU:3")
    assert P("/device:GPU").fill(P("/cpu:0")) == P("/device:GPU:0")  # the index is a field of its own
    assert P("/gpu:*").fill(P("/gpu:1")) == P("/gpu:*")  # '*' is set: a default does not replace it


# TensorFlow's own cases, as strings of nested tf.device scopes and the device TF gives
# (tensorflow/python/framework/device_spec_test.py test_combine, ops_test.py testNesting*).
TF_NESTING: list[tuple[list[str], str]] = [
    (["/job:foo/replica:0", "/task:1/device:GPU:2"], "/job:foo/replica:0/task:1/device:GPU:2"),
    (["/task:1/cpu:0", "/job:boo/device:GPU:0"], "/job:boo/task:1/device:GPU:0"),
    (["/task:1/cpu:0", "/job:boo/device:GPU:0", "/job:muu/cpu:2"], "/job:muu/task:1/device:CPU:2"),
    (["/device:GPU:0", "/job:worker"], "/job:worker/device:GPU:0"),
    (["/device:GPU:0", "/job:worker", "/device:CPU:0"], "/job:worker/device:CPU:0"),
    (["/device:GPU:0", "/job:worker", "/device:CPU:0", "/job:ps"], "/job:ps/device:CPU:0"),
    (["/device:GPU:0", "/job:worker", "/device:CPU:0", "/job:ps", ""], "/job:ps/device:CPU:0"),
    (["/job:worker/replica:2/device:CPU:1", "/job:worker/replica:2/device:GPU:2"],
     "/job:worker/replica:2/device:GPU:2"),
    (["/device:CPU:*", "/device:CPU:5"], "/device:CPU:5"),
    # make_merged_spec takes each field from the inner spec when set: the index survives a type change
    (["/device:GPU:1", "/device:CPU"], "/device:CPU:1"),
]


@pytest.mark.parametrize(("scopes", "expected"), TF_NESTING)
def test_nested_scopes_merge_as_tensorflow_does(scopes: list[str], expected: str) -> None:
    merged = DeviceSpec()
    for text in scopes:
        merged = merged.merge(P(text))
    assert merged == P(expected)


def test_a_star_index_wins_where_tensorflow_would_keep_the_outer_one() -> None:
    # ops_test.py testNestingWithDeviceStringWildcard: TF gives GPU:7, because it parses '*' as no index.
    # Here '*' asks for any GPU (Dask chooses), an index like any other: the inner one wins.
    assert P("/device:GPU:7").merge(P("/device:GPU:*")) == P("/device:GPU:*")
    assert P("/device:GPU:7").merge(P("/device:GPU")) == P("/device:GPU:7")  # TF's GPU:* is written /gpu here


# --- matches, properties, helpers ---------------------------------------------------------

DEV = P("/job:worker/replica:0/task:1/device:GPU:2")


@pytest.mark.parametrize(
    ("pattern", "device", "expected"),
    [
        ("", "/job:worker/replica:0/task:1/device:GPU:2", True),
        ("/gpu:*", "/job:worker/replica:0/task:1/device:GPU:2", True),
        ("/gpu:*", "/gpu:*", True),
        ("/gpu:*", "/cpu:0", False),
        ("/gpu:*", "/device:GPU", False),  # set in pattern, unset in device
        ("/gpu:2", "/gpu:*", False),
        ("/job:worker/gpu:2", "/job:worker/replica:0/task:1/device:GPU:2", True),
        ("/job:ps", "/job:worker/replica:0/task:1/device:GPU:2", False),
        ("/task:0", "/job:worker/replica:0/task:1/device:GPU:2", False),
        ("/cpu:2", "/job:worker/replica:0/task:1/device:GPU:2", False),
        ("/device:GPU", "/job:worker/replica:0/task:1/device:GPU:2", True),
        ("/job:worker", "/gpu:0", False),
    ],
)
def test_matches(pattern: str, device: str, expected: bool) -> None:
    assert P(pattern).matches(P(device)) is expected


def test_properties_and_helpers() -> None:
    assert DeviceSpec().is_empty and not P("/cpu:0").is_empty
    assert DEV.is_complete and canonical_device("w", 0, "GPU", ANY).is_complete
    assert not P("/job:worker/task:1/gpu:2").is_complete
    assert P("/gpu:*").is_any_index and not DEV.is_any_index
    assert DEV.task_spec() == P("/job:worker/replica:0/task:1")
    assert [P(s).short() for s in ("/gpu:0", "/cpu:0", "/gpu:*", "/device:CPU", "/job:a")] == [
        "GPU:0", "CPU:0", "GPU:*", "CPU", ""
    ]
    assert P("/job:ps/gpu:0").set_fields() == ("job", "device_type", "device_index")
    assert P("/job:ps/gpu:0").unset_fields() == ("replica", "task")
    assert DEV.replace(task=3, device_index=ANY) == P("/job:worker/replica:0/task:3/device:GPU:*")
    assert canonical_device("worker", 1, "gpu", 2) == DEV
    assert P("/gpu:0") is P(" /gpu:0 ")  # cached
    assert pickle.loads(pickle.dumps(DEV)) == DEV and hash(DEV) == hash(P(DEV.to_string()))
    assert repr(DEV) == "DeviceSpec('/job:worker/replica:0/task:1/device:GPU:2')"


def test_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEV.task = 2  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        DEV.extra = 1  # type: ignore[attr-defined]


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("/gpu:x", "device index must be a non-negative integer or '*'"),
        ("/gpu:-1", "device index must be a non-negative integer or '*'"),
        ("/device:GPU:", "device index must be a non-negative integer or '*'"),
        ("/cpu:0/gpu:1", "more than one device type (CPU and GPU)"),
        ("/gpu:0/gpu:1", "field 'device' given more than once"),
        ("/job:ps/foo:1", "unknown field 'foo' (expected job, replica, task, device, cpu or gpu)"),
        ("/tpu:0", "unknown device type 'TPU' (expected CPU or GPU)"),
        ("/device:tpu:0", "unknown device type 'TPU' (expected CPU or GPU)"),
        ("/device:", "device type must not be empty (expected CPU or GPU)"),
        ("/device:GPU:0:1", "expected device:TYPE or device:TYPE:N"),
        ("/gpu:0:1", "expected gpu or gpu:N"),
        ("/job:a/job:b", "field 'job' given more than once"),
        ("/task:0/task:1", "field 'task' given more than once"),
        ("/task:-1", "task must be a non-negative integer"),
        ("/task:1.5", "task must be a non-negative integer"),
        ("/replica:x", "replica must be a non-negative integer"),
        ("/job:", "job name must not be empty"),
        ("/job:/task:0", "job name must not be empty"),
        ("/job", "expected job:NAME"),
        ("/task", "expected task:N"),
        ("/job:1ps", "job name '1ps' must match [A-Za-z_][A-Za-z0-9_-]*"),
        ("/job:ps//task:0", "empty field (stray '/')"),
        ("/job:ps/", "empty field (stray '/')"),
    ],
)
def test_parse_errors(text: str, reason: str) -> None:
    message = f"invalid device string '{text}': {reason}"
    with pytest.raises(DeviceSpecError, match=f"^{re.escape(message)}$"):
        P(text)


def test_errors_are_value_errors_and_quote_stripped_text() -> None:
    with pytest.raises(ValueError, match=re.escape("invalid device string '/gpu:x':")):
        P("  /gpu:x  ")
    with pytest.raises(DeviceSpecError, match="device must be a string, got int"):
        P(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"task": -1}, "task must be a non-negative integer, got -1"),
        ({"replica": True}, "replica must be a non-negative integer, got True"),
        ({"job": "a b"}, "job must match [A-Za-z_][A-Za-z0-9_-]*, got 'a b'"),
        ({"device_type": "tpu"}, "device_type must be 'CPU' or 'GPU', got 'tpu'"),
        ({"device_type": 1}, "device_type must be 'CPU' or 'GPU', got 1"),
        ({"device_type": "GPU", "device_index": "x"}, "device_index must be a non-negative integer or '*', got 'x'"),
        ({"device_index": 0}, "device_index needs a device_type"),
    ],
)
def test_constructor_validates(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(DeviceSpecError, match=f"^{re.escape('invalid DeviceSpec: ' + reason)}$"):
        DeviceSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["gpu", "GPU", "Gpu", "cpu", "Cpu"])
def test_constructor_accepts_any_case_of_the_type_as_tensorflow(kind: str) -> None:
    # TF: DeviceSpec(device_type="gpu").device_type == "GPU" (_as_device_str_or_none)
    spec = DeviceSpec(job="ps", device_type=kind, device_index=1)
    assert spec.device_type == kind.upper()
    assert spec == P(f"/job:ps/device:{kind.upper()}:1")
    assert spec.to_string() == f"/job:ps/device:{kind.upper()}:1"
    assert hash(spec) == hash(P(spec.to_string()))
    assert DEV.replace(device_type=kind) == DEV.replace(device_type=kind.upper())
    assert canonical_device("w", 0, kind, 0) == DeviceSpec("w", 0, 0, kind, 0)


def test_replace_validates() -> None:
    with pytest.raises(DeviceSpecError, match=re.escape("task must be a non-negative integer")):
        DEV.replace(task=-2)
    with pytest.raises(DeviceSpecError, match=re.escape("unknown DeviceSpec field 'host'")):
        DEV.replace(host="x")
