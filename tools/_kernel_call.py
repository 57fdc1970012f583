"""What the grader runs INSIDE a student's kernel to call one of the student's functions.

The grader never lets the student's process judge an answer. It sends this file's source to
the kernel with the call to make (an expression naming the student's function, and the
arguments, pickled: the grader's own data, safe for the kernel to load); the kernel calls the
function and writes back what it returned (or raised) as plain data only: JSON for the
structure and NumPy's .npz (loaded without pickle) for arrays. torch tensors,
``nn.MultiheadAttention`` modules and lib's ``MHAParams`` travel as their arrays and settings
and are rebuilt by the grader. So nothing the submission does in its kernel (replacing
``lib.checks``, patching NumPy, ``sys.modules``, ...) runs in the grader's process: the worst
it can do is send wrong data, which the grader's checks then judge like any other answer.

This file is read as text by tools.grade (it is not imported by the grader); it expects
``_user_ns``, ``_args_path`` and ``_result_dir`` as globals.
"""

import json
import os
import pickle
import sys

import numpy as np

_MAX_ITEMS = 100_000


def _encode(value, arrays, depth=0):
    def store(arr):
        key = f"a{len(arrays)}"
        arrays[key] = arr
        return key

    if depth > 20:
        return {"t": "opaque", "type": type(value).__name__, "repr": "nested too deeply"}
    if value is None:
        return {"t": "none"}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, int):
        return {"t": "int", "v": str(value)}
    if isinstance(value, float):
        return {"t": "float", "v": repr(value)}
    if isinstance(value, str):
        return {"t": "str", "v": value[:2000]}
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return {"t": "npscalar", "a": store(np.asarray(value))}
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufc" and value.size <= 10 * _MAX_ITEMS:
            return {"t": "array", "a": store(np.ascontiguousarray(value))}
        if value.dtype.kind == "O" and value.size <= _MAX_ITEMS:
            return {"t": "list", "v": [_encode(x, arrays, depth + 1) for x in value.tolist()]}
    if isinstance(value, list | tuple) and len(value) <= _MAX_ITEMS:
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {"t": kind, "v": [_encode(x, arrays, depth + 1) for x in value]}
    if isinstance(value, dict) and len(value) <= _MAX_ITEMS:
        return {
            "t": "dict",
            "v": [
                [_encode(k, arrays, depth + 1), _encode(v, arrays, depth + 1)]
                for k, v in value.items()
            ],
        }
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        data = value.detach().cpu()
        if (
            data.dtype not in (torch.float64, torch.float32, torch.bool)
            and data.is_floating_point()
        ):
            data = data.float()
        return {"t": "tensor", "dtype": str(value.dtype), "a": store(data.numpy().copy())}
    if torch is not None and isinstance(value, torch.nn.MultiheadAttention):
        m = value
        config = {
            "embed_dim": int(m.embed_dim),
            "num_heads": int(m.num_heads),
            "dropout": float(m.dropout),
            "bias": m.in_proj_bias is not None,
            "add_bias_kv": m.bias_k is not None,
            "add_zero_attn": bool(m.add_zero_attn),
            "kdim": int(m.kdim),
            "vdim": int(m.vdim),
            "batch_first": bool(m.batch_first),
            "dtype": str(m.out_proj.weight.dtype),
        }
        state = {k: store(v.detach().cpu().numpy().copy()) for k, v in m.state_dict().items()}
        return {"t": "mha", "config": config, "training": bool(m.training), "state": state}
    attention = sys.modules.get("lib.attention")
    if attention is not None and isinstance(value, attention.MHAParams):
        names = ("W_q", "W_k", "W_v", "W_o", "n_heads", "b_q", "b_k", "b_v", "b_o")
        fields = {k: _encode(getattr(value, k, None), arrays, depth + 1) for k in names}
        return {"t": "mhaparams", "v": fields}
    text = ""
    try:
        text = repr(value)[:200]
    except Exception:  # noqa: BLE001
        pass
    return {"t": "opaque", "type": type(value).__name__, "repr": text}


def _run():
    with open(_args_path, "rb") as f:  # noqa: F821 - set by the grader
        expr, args, refused = pickle.load(f)
    try:
        fn = eval(expr, _user_ns)  # noqa: F821, S307 - the course's own check call
    except Exception as exc:  # noqa: BLE001
        return {"kind": "undefined", "message": f"{type(exc).__name__}: {exc}"}, {}
    arrays = {}
    try:
        if refused:  # lib functions the exercise asks the student to write themselves
            from lib.checks._core import refusing

            with refusing(refused):
                value = fn(*args)
        else:
            value = fn(*args)
        return {"kind": "value", "value": _encode(value, arrays)}, arrays
    except BaseException as exc:  # noqa: BLE001 - everything the student raises is data
        try:
            from lib.checks._core import raised_in

            where = raised_in(exc, fn) or ""
        except Exception:  # noqa: BLE001
            where = ""
        types = [f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__]
        try:
            message = str(exc)[:2000]
        except Exception:  # noqa: BLE001
            message = ""
        return {
            "kind": "error",
            "name": type(exc).__name__,
            "types": types,
            "message": message,
            "raised_in": where,
        }, {}


try:
    _result, _arrays = _run()
except BaseException as _exc:  # noqa: BLE001
    _result, _arrays = {"kind": "broken", "message": f"{type(_exc).__name__}: {_exc}"}, {}
np.savez(os.path.join(_result_dir, "arrays.npz"), **_arrays)  # noqa: F821
with open(os.path.join(_result_dir, "result.json"), "w") as _f:  # noqa: F821
    json.dump(_result, _f)
