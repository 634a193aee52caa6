"""An array of no library the tests know, with the DLPack protocol over a torch tensor: what
gemmkit sees of CuPy, JAX or Numba arrays, without them. This module has no from_dlpack, so
results for it come back as torch tensors."""


class Array:
    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()
