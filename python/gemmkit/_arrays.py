"""Arrays of other libraries through DLPack. An argument that is not a torch tensor but has
__dlpack__ (CuPy, JAX, Numba, ...) is taken as a torch tensor over the same memory
(torch.from_dlpack, which also orders the producer's stream before torch's current one), and a
result made for such a call goes back through the caller's library's from_dlpack (cupy.from_dlpack,
jax.numpy.from_dlpack), over the same memory again. Where that library has no from_dlpack or
cannot hold the result's dtype (CuPy has no bfloat16 or FP8), the torch tensor is returned."""

import importlib

# Modules whose from_dlpack takes back arrays of a type defined elsewhere (jax's arrays are
# jaxlib's).
_HOMES = {"jaxlib": "jax.numpy"}


def to_torch(torch, arrays, names):
    """(the arrays as torch tensors, the library to return results in or None). None stays None;
    an object that is neither a tensor nor has __dlpack__ stays as it is, for the checks to name."""
    for array in arrays:  # the usual case first: torch tensors and None, returned as they are
        if array is not None and not isinstance(array, torch.Tensor):
            break
    else:
        return arrays, None
    kind, tensors = None, []
    for array, name in zip(arrays, names):
        if array is None or isinstance(array, torch.Tensor) or not hasattr(array, "__dlpack__"):
            tensors.append(array)
            continue
        try:
            tensors.append(torch.from_dlpack(array))
        except Exception as error:
            raise TypeError(f"{name}: {type(array).__name__} could not be taken through DLPack: {error}") from error
        if kind is None:
            kind = type(array).__module__.partition(".")[0]
    return tensors, kind


def to_caller(result, kind, out=None):
    """`out` where the caller gave one; else the result in the caller's library (`kind`), a pair
    (an e4m3 output and its scales) item by item."""
    if out is not None:
        return out
    if kind is None:
        return result
    if isinstance(result, tuple):
        return tuple(to_caller(r, kind) for r in result)
    try:
        return importlib.import_module(_HOMES.get(kind, kind)).from_dlpack(result)
    except Exception:  # no from_dlpack there, or no such dtype: the torch tensor
        return result
