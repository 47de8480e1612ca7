"""The native-speed Arrow paths between record batches and Arrow tables.

- ``arrow_codec``: the entry points (``scan_batches``, ``decode_to_arrow``, ``encode_arrow``)
- ``arrow_scan``, ``arrow_decode``, ``arrow_encode``: the passes over batches
- ``_decode_kernels``, ``_encode_kernels``: the kernels, written once for numba
- ``kernel_loading``: bind the kernels on first call to the module compiled ahead of time,
  else to numba's JIT (loaded from numba's cache without numba's whole set-up)
- ``aot_kernels``: find and load the module compiled ahead of time, without numba
- ``aot_build``: compile that module from the kernels (numba's pycc)
- ``warmup``: compile the kernels ahead of their first use (numba's cache and the module)
"""
