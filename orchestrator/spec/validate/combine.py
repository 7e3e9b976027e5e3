"""The weights of a replicate's ``combine: mean``, fixed where the lengths of its split inputs are first known.

A copy that computes a mean over its piece of an uneven split does not count
as much as the others: 7 rows over 2 copies are pieces of 4 and 3, and the
batch mean is (4·m₀ + 3·m₁) / 7, not (m₀ + m₁) / 2. The expansion records
which splits weigh a mean (its ``split`` parameter) but cannot know their
lengths; shape inference can, so this stage writes the weights into the op
(``weights``: one relative weight per copy), where the kernel and the plan
read them and nothing works them out again.

* Nothing split: every copy weighs 1 (the copies are equal).
* Split inputs: copy i weighs its piece's rows. Several split inputs must
  give equal pieces (one length, whatever their axes): otherwise no single
  weighting is the batch's, and that is an error.
* A split input of unknown length (a ``load`` without ``shape``, a ``call``
  without ``output``): an error, since guessing equal weights is the silent
  wrong mean this exists to prevent.
* Every piece empty (a length of 0): equal weights; each copy's value is
  what one device gives for no rows.

``add_n`` and ``concat`` need no weights: the sum of the pieces' sums is the
batch's sum, and the pieces concatenated in order are the batch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from ...ops.values import ValueInfo
from ..records import Op
from .checker import Checker

Values = Mapping[str, tuple[ValueInfo, ...]]


def settle_weights(c: Checker, order: Sequence[Op], values: Values) -> list[Op]:
    """``order`` with each ``mean_n`` carrying its ``weights``; an error where they cannot be known."""
    by_name = {op.name: op for op in order}
    # a sweep's mean carries its weights already (equal, or each copy's weighted_by value)
    return [_weighed(c, op, by_name, values) if op.kind == "mean_n" and "split" in op.params else op
            for op in order]


def _weighed(c: Checker, op: Op, by_name: Mapping[str, Op], values: Values) -> Op:
    splits = [by_name[name] for name in op.params.get("split", ()) if name in by_name]
    pieces: dict[str, tuple[int, ...]] = {}
    for split in splits:
        rows = _rows(split, values)
        if rows is None:
            # unknown because of a shape error upstream: that error is the one to fix
            if _length_unknown(split, values) and not any(d.code == "shape" for d in c.diags):
                c.error("combine-weights", op.path,
                        f"combine '{op.path[-1]}' of '{op.group}' is a mean weighed by the rows of each copy's "
                        f"piece of '{split.path[-1]}', whose length is not known before the run",
                        "declare the shape of what is split: shape: on a load, output: on a call; "
                        "or combine with add_n and divide by the number of rows", key=True)
            return op
        pieces[str(split.path[-1])] = rows
    if len(set(pieces.values())) > 1:
        shown = ", ".join(f"'{x}' into {' + '.join(map(str, rows))}" for x, rows in pieces.items())
        c.error("combine-weights", op.path,
                f"combine '{op.path[-1]}' of '{op.group}' is a mean weighed by the rows of each copy's piece, "
                f"but the split inputs are cut differently: {shown}",
                "split inputs of one length, or combine this value with add_n or concat", key=True)
        return op
    rows = next(iter(pieces.values()), ())
    weights = list(rows) if sum(rows) else [1] * len(op.inputs)
    return replace(op, params={**op.params, "weights": weights, **_last_batch(splits, by_name, values)})


def _last_batch(splits: Sequence[Op], by_name: Mapping[str, Op], values: Values) -> dict[str, object]:
    """A split of a minibatch whose epochs end in a partial batch: that batch's weights too, and where it is.

    A batch of 32 rows splits 16 + 16; the last one of 100 rows (4) 2 + 2, but one of 99 (3) 2 + 1: the mean
    must weigh that step's copies by that step's pieces. The kernel tells the steps apart as the batches do.
    """
    for split in splits:
        source = by_name.get(split.inputs[0].op)
        if source is None or source.kind != "minibatch":
            continue
        data = values.get(source.inputs[0].op, ())
        if not data or data[0].shape is None or not data[0].shape:
            return {}
        rows, size = int(data[0].shape[0]), int(source.params["size"])
        across = bool(source.params.get("across_epochs"))
        epochs = source.params.get("epochs")
        # across epochs only the run's last batch may be partial (and only when the epochs bound the stream)
        left = (int(epochs) * rows if epochs is not None else 0) % size if across else rows % size
        if not left or source.params.get("drop_last"):
            return {}
        num = int(split.params["num"])
        pieces = [left // num + (1 if i < left % num else 0) for i in range(num)]  # as array_split cuts them
        return {"weights_last": pieces if sum(pieces) else [1] * num,
                "batches": {"rows": rows, "size": size, "steps": int(source.params.get("steps") or 0),
                            **({"across_epochs": True} if across else {})}}
    return {}


def _rows(split: Op, values: Values) -> tuple[int, ...] | None:
    """The rows (length along the split axis) of each piece; None when shape inference does not know them."""
    axis = int(split.params.get("axis", 0) or 0)
    infos = values.get(split.name, ())
    if not infos or any(info.shape is None or not -len(info.shape) <= axis < len(info.shape) for info in infos):
        return None
    return tuple(int(info.shape[axis]) for info in infos if info.shape is not None)


def _length_unknown(split: Op, values: Values) -> bool:
    source = split.inputs[0]
    infos = values.get(source.op, ())
    index = source.output or 0
    return index >= len(infos) or infos[index].shape is None
