"""Compiled (numba) kernels that write Kafka v2 records and batch headers from Arrow buffers.

Two passes: ``plan`` sizes every record and splits them into batches exactly as Kafka's
producer fills a batch (a record joins the open batch while header + records stay within the
batch size; a batch always takes its first record); ``write`` then lays out the bytes.
All inputs come from validated Arrow buffers; indices are still checked against the arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import HEADER_SIZE, memcpy

OK = 0
E_RECORD_TOO_LARGE = 1  # a record (or one field) would not fit Kafka's int32 lengths
E_BAD_OFFSETS = 2       # Arrow offsets that point outside their data buffer
E_CAPACITY = 3          # output buffer too small (cannot happen for a consistent plan)

_INT32_MAX = 2**31 - 1


@njit(cache=True, nogil=True, inline="always")
def _zz64(v):
    return (v << 1) ^ (v >> 63)


@njit(cache=True, nogil=True, inline="always")
def _uvarint_size(u):
    """Bytes of an unsigned base-128 varint of the 64 bits in ``u`` (int64 bit pattern)."""
    size = 1
    while (u & ~np.int64(0x7F)) != 0:
        u = (u >> 7) & 0x01FFFFFFFFFFFFFF
        size += 1
    return size


@njit(cache=True, nogil=True, inline="always")
def _svarint_size(v):
    return _uvarint_size(_zz64(v))


@njit(cache=True, nogil=True, inline="always")
def _put_svarint(out, pos, v):
    u = _zz64(v)
    while (u & ~np.int64(0x7F)) != 0:
        out[pos] = np.uint8((u & 0x7F) | 0x80)
        pos += 1
        u = (u >> 7) & 0x01FFFFFFFFFFFFFF
    out[pos] = np.uint8(u)
    return pos + 1


@njit(cache=True, nogil=True, inline="always")
def _put_be(out, pos, v, width):
    for i in range(width):
        out[pos + i] = np.uint8((v >> (8 * (width - 1 - i))) & 0xFF)


@njit(cache=True, nogil=True, inline="always")
def _field_size(off, valid, data_len, i):
    """Bytes of a length-prefixed nullable field; -1 if its offsets are out of bounds."""
    if valid[i] == 0:
        return 1  # varint(-1)
    start = off[i]
    length = off[i + 1] - start
    if start < 0 or length < 0 or off[i + 1] > data_len or length > _INT32_MAX:
        return -1
    return _svarint_size(length) + length


@njit(cache=True, nogil=True)
def _headers_size(i, h_list_off, h_list_valid, hk_off, hk_len, hv_off, hv_valid, hv_len):
    """Bytes of record i's header count and headers; -1 on bad offsets."""
    if h_list_valid[i] == 0:
        return 1
    first = h_list_off[i]
    last = h_list_off[i + 1]
    if first < 0 or last < first or last >= hk_off.shape[0] or last >= hv_off.shape[0]:
        return -1
    size = _svarint_size(last - first)
    for h in range(first, last):
        ks = hk_off[h]
        kl = hk_off[h + 1] - ks
        if ks < 0 or kl < 0 or hk_off[h + 1] > hk_len or kl > _INT32_MAX:
            return -1
        size += _svarint_size(kl) + kl
        vs = _field_size(hv_off, hv_valid, hv_len, h)
        if vs < 0:
            return -1
        size += vs
    return size


@njit(cache=True, nogil=True)
def plan(v_off, v_valid, v_len, k_off, k_valid, k_len, ts, has_headers, h_list_off,
         h_list_valid, hk_off, hk_len, hv_off, hv_valid, hv_len, max_batch_bytes):
    """Size records and split them into batches.

    Returns (status, error row, batch count, body length per record, first record per batch,
    record bytes per batch, max timestamp per batch).
    """
    n = ts.shape[0]
    body = np.empty(n, np.int64)
    first = np.empty(n + 1, np.int64)
    region = np.empty(n + 1, np.int64)
    max_ts = np.empty(n + 1, np.int64)
    nb = 0
    cur = 0  # record bytes in the open batch
    base_ts = np.int64(0)
    open_first = 0
    for i in range(n):
        ks = _field_size(k_off, k_valid, k_len, i)
        vs = _field_size(v_off, v_valid, v_len, i)
        if ks < 0 or vs < 0:
            return E_BAD_OFFSETS, i, nb, body, first, region, max_ts
        hs = 1
        if has_headers:
            hs = _headers_size(i, h_list_off, h_list_valid, hk_off, hk_len, hv_off, hv_valid,
                               hv_len)
            if hs < 0:
                return E_BAD_OFFSETS, i, nb, body, first, region, max_ts
        fixed = 1 + ks + vs + hs  # attributes, key, value, headers
        t = ts[i]
        bl = np.int64(0)
        rs = np.int64(0)
        if i > open_first:
            bl = fixed + _svarint_size(t - base_ts) + _svarint_size(i - open_first)
            rs = bl + _svarint_size(bl)
            if HEADER_SIZE + cur + rs > max_batch_bytes:  # close the batch; i opens the next
                region[nb - 1] = cur
                open_first = i
        if i == open_first:
            first[nb] = i
            max_ts[nb] = t
            nb += 1
            base_ts = t
            cur = 0
            bl = fixed + 2  # timestampDelta 0 and offsetDelta 0: one byte each
            rs = bl + _svarint_size(bl)
        if bl > _INT32_MAX or HEADER_SIZE + cur + rs > _INT32_MAX:
            return E_RECORD_TOO_LARGE, i, nb, body, first, region, max_ts
        body[i] = bl
        cur += rs
        if t > max_ts[nb - 1]:
            max_ts[nb - 1] = t
    if nb > 0:
        region[nb - 1] = cur
    first[nb] = n
    return OK, -1, nb, body, first, region, max_ts


@njit(cache=True, nogil=True, inline="always")
def _put_field(out, pos, off, valid, data, i):
    if valid[i] == 0:
        out[pos] = 1  # varint(-1)
        return pos + 1
    start = off[i]
    length = off[i + 1] - start
    pos = _put_svarint(out, pos, length)
    if length > 0:
        memcpy(out, pos, data, start, length)
    return pos + length


@njit(cache=True, nogil=True)
def write(out, rec_pos, hdr_pos, write_headers, first, region, max_ts, body, v_off, v_valid,
          v_data, k_off, k_valid, k_data, ts, has_headers, h_list_off, h_list_valid, hk_off,
          hk_data, hv_off, hv_valid, hv_data, attributes, producer_id, producer_epoch,
          base_sequence):
    """Write each planned batch's records at rec_pos[b] (and its header, CRC 0, at hdr_pos[b]).

    Returns a status; positions and sizes come from ``plan``, checked against ``out``.
    """
    nb = rec_pos.shape[0]
    cap = out.shape[0]
    for b in range(nb):
        lo = first[b]
        hi = first[b + 1]
        pos = rec_pos[b]
        if pos < 0 or pos + region[b] > cap:
            return E_CAPACITY
        if write_headers:
            h = hdr_pos[b]
            if h < 0 or h + HEADER_SIZE > cap:
                return E_CAPACITY
            _put_be(out, h, 0, 8)
            _put_be(out, h + 8, HEADER_SIZE - 12 + region[b], 4)
            _put_be(out, h + 12, -1, 4)
            out[h + 16] = 2
            _put_be(out, h + 17, 0, 4)
            _put_be(out, h + 21, attributes, 2)
            _put_be(out, h + 23, hi - lo - 1, 4)
            _put_be(out, h + 27, ts[lo], 8)
            _put_be(out, h + 35, max_ts[b], 8)
            _put_be(out, h + 43, producer_id, 8)
            _put_be(out, h + 51, producer_epoch, 2)
            _put_be(out, h + 53, batch_sequence(base_sequence, lo), 4)
            _put_be(out, h + 57, hi - lo, 4)
        base_ts = ts[lo]
        end = pos + region[b]
        for i in range(lo, hi):
            bl = body[i]
            if pos + _svarint_size(bl) + bl > end:
                return E_CAPACITY
            pos = _put_svarint(out, pos, bl)
            out[pos] = 0
            pos += 1
            pos = _put_svarint(out, pos, ts[i] - base_ts)
            pos = _put_svarint(out, pos, i - lo)
            pos = _put_field(out, pos, k_off, k_valid, k_data, i)
            pos = _put_field(out, pos, v_off, v_valid, v_data, i)
            if has_headers and h_list_valid[i] != 0:
                hf = h_list_off[i]
                hl = h_list_off[i + 1]
                pos = _put_svarint(out, pos, hl - hf)
                for hh in range(hf, hl):
                    ks = hk_off[hh]
                    kl = hk_off[hh + 1] - ks
                    pos = _put_svarint(out, pos, kl)
                    if kl > 0:
                        memcpy(out, pos, hk_data, ks, kl)
                    pos += kl
                    pos = _put_field(out, pos, hv_off, hv_valid, hv_data, hh)
            else:
                out[pos] = 0
                pos += 1
        if pos != end:
            return E_CAPACITY
    return OK


@njit(cache=True, nogil=True)
def batch_sequence(base_sequence, records_before):
    """Kafka's incrementSequence: baseSequence of a later batch, wrapping past int32 max."""
    if base_sequence < 0:
        return -1
    inc = records_before % (np.int64(_INT32_MAX) + 1)
    if base_sequence > _INT32_MAX - inc:
        return inc - (_INT32_MAX - base_sequence) - 1
    return base_sequence + inc
