"""The native-speed Arrow paths between record batches and Arrow tables.

- ``arrow_codec``: the entry points (``scan_batches``, ``decode_to_arrow``, ``encode_arrow``)
- ``arrow_scan``, ``arrow_decode``, ``arrow_encode``: the passes over batches
- ``_decode_kernels``, ``_encode_kernels``: the numba kernels
- ``kernel_loading``: load the kernels from numba's cache without numba's whole set-up
- ``warmup``: compile the kernels ahead of their first use
"""
