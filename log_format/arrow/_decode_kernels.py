"""Compiled (numba) decode kernels of the Arrow hot paths: batch scan and record walk.

The encode side is ``_encode_kernels``. Importing either imports no numba: ``@kernel``
(kernel_loading) binds them on first call to the module compiled ahead of time from this
source, or to numba's JIT. ``entry=True`` marks the kernels Python code calls.

Records are varint-framed, so finding their boundaries is a sequential walk; it runs here at
native speed. numba does not bounds-check array accesses, so every read below is checked by
hand against the end of its record, batch or buffer. Kernels never raise: they return a
status code and the byte position of the fault, and the Python callers raise typed errors.

Kernels are compiled without numba's reference counting (``_nrt=False``) and allocate
nothing: callers pass every array. With it, numba increfs/decrefs arrays inside the record
loops (atomic operations, ~10 per record), which cost half of the decode walk and three
quarters of the encode.
"""

from __future__ import annotations

import numpy as np

from .kernel_loading import Intrinsic, kernel

# Kernel status codes (0 = ok). Python turns them into typed errors (arrow_decode.py).
OK = 0
E_HEADER = 1          # batch header invalid: re-parsed by batch_header.parse_header for its error
E_TRUNCATED = 2       # a field runs past its record (or the record past its batch)
E_VARINT = 3          # a varint longer than 5 (varlong: 10) bytes
E_RECORD_LENGTH = 4   # negative record length
E_FIELD_LENGTH = 5    # key/value/header length < -1 or beyond its record
E_SIZE_MISMATCH = 6   # record fields did not consume exactly its declared length
E_COUNT = 7           # batch ended before recordsCount records
E_LEFTOVER = 8        # bytes remain after recordsCount records
E_HEADER_COUNT = 9    # negative header count
E_HEADER_KEY = 10     # negative (null) header key length
E_CONTROL_KEY = 11    # control record key shorter than 4 bytes or negative version
E_CAPACITY = 12       # output capacity exceeded (cannot happen for consistent inputs)

# control_type column values besides the record's own (non-negative) type.
CONTROL_NONE = -1      # not a control batch
CONTROL_EMPTY = -2     # control batch without records (compacted); ignored like Kafka
CONTROL_UNKNOWN = -3   # negative type id: Kafka's ControlRecordType.UNKNOWN
CONTROL_PENDING = -4   # compressed control batch: resolved in Python after decompression

HEADER_SIZE = 61
LOG_OVERHEAD = 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MIN_RECORD_SIZE = 7

# Columns of the int64 matrix the scan fills (arrow_scan builds the structured array).
SCAN_COLUMNS = ("position", "size", "base_offset", "last_offset_delta", "attributes",
                "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                "base_sequence", "records_count", "control_type")


@kernel(cache=True, nogil=True, _nrt=False)
def _be(buf, pos, width):
    """Signed big-endian integer of ``width`` bytes at ``pos`` (caller checked bounds)."""
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(buf[pos + i])
    shift = 64 - 8 * width
    if shift > 0:
        v = (v << shift) >> shift  # sign-extend
    return v


@kernel(cache=True, nogil=True, _nrt=False)
def read_varint(buf, pos, end):
    """Zigzag varint (int32, at most 5 bytes) -> (value, new pos); pos -1 truncated, -2 long."""
    if pos < end:
        b = np.int64(buf[pos])
        if b < 0x80:  # the common one-byte case, kept short so it inlines
            return (b >> 1) ^ -(b & 1), pos + 1
    raw = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), -1
        b = np.int64(buf[pos])
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            return np.int64(0), -2
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


@kernel(cache=True, nogil=True, _nrt=False)
def read_varlong(buf, pos, end):
    """Zigzag varlong (int64, at most 10 bytes) -> (value, new pos); pos -1/-2 as above."""
    if pos < end:
        b = np.int64(buf[pos])
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), -1
        b = np.int64(buf[pos])
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            return np.int64(0), -2
    return ((raw >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(raw & 1), pos


@kernel(cache=True, nogil=True, _nrt=False)
def _varint_status(pos):
    return E_TRUNCATED if pos == -1 else E_VARINT


@kernel(entry=True, cache=True, nogil=True, _nrt=False)
def control_type_at(buf, pos, end):
    """Type id of the control record starting at ``pos`` -> (type, status)."""
    length, p = read_varint(buf, pos, end)
    if p < 0:
        return CONTROL_NONE, _varint_status(p)
    if length < 0 or length > end - p:
        return CONTROL_NONE, E_TRUNCATED
    rec_end = p + length
    if p >= rec_end:
        return CONTROL_NONE, E_TRUNCATED
    p += 1  # attributes
    _, p = read_varlong(buf, p, rec_end)
    if p < 0:
        return CONTROL_NONE, _varint_status(p)
    _, p = read_varint(buf, p, rec_end)
    if p < 0:
        return CONTROL_NONE, _varint_status(p)
    klen, p = read_varint(buf, p, rec_end)
    if p < 0:
        return CONTROL_NONE, _varint_status(p)
    if klen < 4 or klen > rec_end - p:
        return CONTROL_NONE, E_CONTROL_KEY
    version = _be(buf, p, 2)
    if version < 0:
        return CONTROL_NONE, E_CONTROL_KEY
    ctype = _be(buf, p + 2, 2)
    if ctype < 0:
        return CONTROL_UNKNOWN, OK
    return ctype, OK


@kernel(entry=True, cache=True, nogil=True, _nrt=False)
def scan(buf, out, fill, max_batch_length):
    """Walk batch headers; -> (status, position, count). Fills ``out`` rows when ``fill``."""
    n = buf.shape[0]
    pos = 0
    count = 0
    while pos < n:
        avail = n - pos
        if avail < HEADER_SIZE:
            return E_HEADER, pos, count
        blen = _be(buf, pos + 8, 4)
        if blen < MIN_BATCH_LENGTH or blen > max_batch_length:
            return E_HEADER, pos, count
        if buf[pos + 16] != 2:
            return E_HEADER, pos, count
        size = LOG_OVERHEAD + blen
        if size > avail:
            return E_HEADER, pos, count
        attributes = _be(buf, pos + 21, 2)
        last_delta = _be(buf, pos + 23, 4)
        records = _be(buf, pos + 57, 4)
        if records < 0 or last_delta < 0:
            return E_HEADER, pos, count
        if (attributes & 7) == 0 and records * MIN_RECORD_SIZE > blen - MIN_BATCH_LENGTH:
            return E_HEADER, pos, count
        ctype = np.int64(CONTROL_NONE)
        if attributes & 0x20:
            if records == 0:
                ctype = np.int64(CONTROL_EMPTY)
            elif attributes & 7:
                ctype = np.int64(CONTROL_PENDING)
            else:
                ctype, st = control_type_at(buf, pos + HEADER_SIZE, pos + size)
                if st != OK:
                    return st, pos, count
        if fill:
            if count >= out.shape[0]:
                return E_CAPACITY, pos, count
            row = out[count]
            row[0] = pos
            row[1] = size
            row[2] = _be(buf, pos, 8)
            row[3] = last_delta
            row[4] = attributes
            row[5] = _be(buf, pos + 27, 8)
            row[6] = _be(buf, pos + 35, 8)
            row[7] = _be(buf, pos + 43, 8)
            row[8] = _be(buf, pos + 51, 2)
            row[9] = _be(buf, pos + 53, 4)
            row[10] = records
            row[11] = ctype
        count += 1
        pos += size
    return OK, pos, count


@Intrinsic
def memcpy():  # type: ignore[no-untyped-def]
    """``memcpy(dst, dpos, src, spos, n)``: ``dst[dpos:dpos+n] = src[spos:spos+n]`` as an
    inlined llvm.memcpy (callers check bounds).

    Slice assignment costs ~100 ns per small copy in numba; this is the plain memcpy.
    """
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def memcpy(typingctx, dst, dpos, src, spos, n):
        sig = types.void(dst, types.intp, src, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            d = context.make_array(signature.args[0])(context, builder, args[0])
            s = context.make_array(signature.args[2])(context, builder, args[2])
            dptr = builder.gep(d.data, [args[1]])
            sptr = builder.gep(s.data, [args[3]])
            cgutils.raw_memcpy(builder, dptr, sptr, args[4], 1)
            return context.get_dummy_value()

        return sig, codegen

    return memcpy


@Intrinsic
def prefetch():  # type: ignore[no-untyped-def]
    """``prefetch(arr, idx)``: hint the CPU to load the cache line of ``arr[idx]`` (never
    faults; callers stay in bounds).

    The record walk is a chain of dependent loads (each record's length gives the next
    record's position) that the hardware prefetcher does not run far enough ahead of:
    prefetching ~1 KiB ahead cuts the walk over DRAM-resident batches by more than half.
    """
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, idx):
        sig = types.void(arr, types.intp)

        def codegen(context, builder, signature, args):
            a = context.make_array(signature.args[0])(context, builder, args[0])
            i8p = ir.IntType(8).as_pointer()
            ptr = builder.bitcast(builder.gep(a.data, [args[1]]), i8p)
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            # read, high temporal locality, data cache
            builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3),
                              ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    return prefetch


PREFETCH_AHEAD = 1024  # bytes; ~8 records of 126 B, enough to cover DRAM latency


@kernel(cache=True, nogil=True, _nrt=False)
def _copy(dst, dpos, src, spos, n):
    if n > 0:
        memcpy(dst, dpos, src, spos, n)


@kernel(cache=True, nogil=True, _nrt=False, inline="always")
def _varint_fast(buf, pos, end):
    """read_varint with the one-byte case inline (lengths and deltas of small records)."""
    if pos < end:
        b = np.int64(buf[pos])
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    return read_varint(buf, pos, end)


@kernel(entry=True, cache=True, nogil=True, _nrt=False)
def decode_records(buf, reg_start, reg_end, base_offset, base_ts, max_ts, log_append, counts,
                   start_offset, end_offset, want_headers, key_off, key_data, key_valid,
                   val_off, val_data, val_valid, offsets, stamps, ts_types, list_off,
                   list_valid, header_pos):
    """Walk the records of the given batch regions into Arrow-ready column buffers.

    ``reg_start/reg_end`` bound each batch's record bytes in ``buf`` (the input itself, or
    decompressed payloads). Records outside [start_offset, end_offset) are validated but not
    emitted. The caller allocates the outputs (numpy maps big arrays with huge pages: first
    touch costs a third of numba's 4 KiB pages); ``*_valid`` get one byte per row.
    Headers are validated here; with ``want_headers`` each kept row's first header position
    goes to ``header_pos`` and ``gather_headers`` copies them out once their sizes are known
    (no array is ever reassigned in this loop: that alone made it 3x slower).
    Returns (status, batch index, error position, rows, key bytes, value bytes, key nulls,
    value nulls, headers, header key bytes, header value bytes).
    """
    nb = reg_start.shape[0]
    n_cap = offsets.shape[0]
    kcap = key_data.shape[0]
    vcap = val_data.shape[0]
    key_off[0] = 0
    val_off[0] = 0
    if want_headers:
        list_off[0] = 0
    n = 0
    kpos = 0
    vpos = 0
    knulls = 0
    vnulls = 0
    nh = 0
    hkbytes = 0
    hvbytes = 0
    status = OK
    eb = -1
    epos = -1
    for b in range(nb):
        pos = reg_start[b]
        end = reg_end[b]
        bo = base_offset[b]
        lat = log_append[b] != 0
        ts_type = np.int32(1 if lat else 0)
        # LogAppendTime: every record gets the batch's max timestamp
        ts_base = max_ts[b] if lat else base_ts[b]
        ts_scale = 0 if lat else 1
        rec = pos
        if pos < 0 or end > buf.shape[0] or pos > end:
            status = E_TRUNCATED
            eb = b
            epos = pos
            break
        for _ in range(counts[b]):
            rec = pos
            if pos >= end:
                status = E_COUNT
                break
            if pos + PREFETCH_AHEAD + 64 < end:
                prefetch(buf, pos + PREFETCH_AHEAD)
                prefetch(buf, pos + PREFETCH_AHEAD + 64)
            length, pos = _varint_fast(buf, pos, end)
            if pos < 0:
                status = _varint_status(pos)
                break
            if length < 0:
                status = E_RECORD_LENGTH
                break
            if length > end - pos:
                status = E_TRUNCATED
                break
            rec_end = pos + length
            if pos >= rec_end:
                status = E_TRUNCATED
                break
            pos += 1  # attributes: unused
            tsd, pos = read_varlong(buf, pos, rec_end)
            if pos < 0:
                status = _varint_status(pos)
                break
            od, pos = _varint_fast(buf, pos, rec_end)
            if pos < 0:
                status = _varint_status(pos)
                break
            klen, pos = _varint_fast(buf, pos, rec_end)
            if pos < 0:
                status = _varint_status(pos)
                break
            if klen < -1 or klen > rec_end - pos:
                status = E_FIELD_LENGTH
                break
            kstart = pos
            if klen > 0:
                pos += klen
            vlen, pos = _varint_fast(buf, pos, rec_end)
            if pos < 0:
                status = _varint_status(pos)
                break
            if vlen < -1 or vlen > rec_end - pos:
                status = E_FIELD_LENGTH
                break
            vstart = pos
            if vlen > 0:
                pos += vlen
            hcount, pos = _varint_fast(buf, pos, rec_end)
            if pos < 0:
                status = _varint_status(pos)
                break
            if hcount < 0:
                status = E_HEADER_COUNT
                break
            hstart = pos
            rec_hk = 0
            rec_hv = 0
            for _h in range(hcount):
                hklen, pos = _varint_fast(buf, pos, rec_end)
                if pos < 0:
                    status = _varint_status(pos)
                    break
                if hklen < 0:
                    status = E_HEADER_KEY
                    break
                if hklen > rec_end - pos:
                    status = E_FIELD_LENGTH
                    break
                pos += hklen
                hvlen, pos = _varint_fast(buf, pos, rec_end)
                if pos < 0:
                    status = _varint_status(pos)
                    break
                if hvlen < -1 or hvlen > rec_end - pos:
                    status = E_FIELD_LENGTH
                    break
                if hvlen > 0:
                    pos += hvlen
                    rec_hv += hvlen
                rec_hk += hklen
            if status != OK:
                break
            if pos != rec_end:
                status = E_SIZE_MISMATCH
                break
            offset = bo + od
            if offset >= start_offset and offset < end_offset:
                if n >= n_cap or kpos + klen > kcap or vpos + vlen > vcap:
                    status = E_CAPACITY
                    break
                if klen > 0:
                    memcpy(key_data, kpos, buf, kstart, klen)
                    kpos += klen
                if vlen > 0:
                    memcpy(val_data, vpos, buf, vstart, vlen)
                    vpos += vlen
                key_valid[n] = klen >= 0
                val_valid[n] = vlen >= 0
                knulls += klen < 0
                vnulls += vlen < 0
                key_off[n + 1] = kpos
                val_off[n + 1] = vpos
                offsets[n] = offset
                stamps[n] = (ts_base + ts_scale * tsd) * 1000
                ts_types[n] = ts_type
                if want_headers:
                    nh += hcount
                    hkbytes += rec_hk
                    hvbytes += rec_hv
                    list_off[n + 1] = nh
                    list_valid[n] = hcount > 0
                    header_pos[n] = hstart
                n += 1
        if status != OK:
            eb = b
            epos = rec
            break
        if pos != end:
            status = E_LEFTOVER
            eb = b
            epos = pos
            break
    return status, eb, epos, n, kpos, vpos, knulls, vnulls, nh, hkbytes, hvbytes


@kernel(entry=True, cache=True, nogil=True, _nrt=False)
def gather_headers(buf, header_pos, list_off, n, hk_off, hk_data, hv_off, hv_data, hv_valid):
    """Copy the headers of rows [0, n) (validated by decode_records) into Arrow buffers.

    Sizes come from decode_records, so nothing grows; reads and writes are still checked.
    Returns (status, header values that are null).
    """
    size = buf.shape[0]
    nh = hk_off.shape[0] - 1
    hkpos = 0
    hvpos = 0
    h = 0
    nulls = 0
    hk_off[0] = 0
    hv_off[0] = 0
    for i in range(n):
        pos = header_pos[i]
        for _ in range(list_off[i + 1] - list_off[i]):
            if h >= nh:
                return E_CAPACITY, nulls
            hklen, pos = read_varint(buf, pos, size)
            if pos < 0 or hklen < 0 or hklen > size - pos or hkpos + hklen > hk_data.shape[0]:
                return E_CAPACITY, nulls
            _copy(hk_data, hkpos, buf, pos, hklen)
            pos += hklen
            hkpos += hklen
            hvlen, pos = read_varint(buf, pos, size)
            if pos < 0 or hvlen < -1 or hvlen > size - pos or hvpos + hvlen > hv_data.shape[0]:
                return E_CAPACITY, nulls
            if hvlen >= 0:
                _copy(hv_data, hvpos, buf, pos, hvlen)
                pos += hvlen
                hvpos += hvlen
            hv_valid[h] = hvlen >= 0
            nulls += hvlen < 0
            h += 1
            hk_off[h] = hkpos
            hv_off[h] = hvpos
    return (OK if h == nh else E_CAPACITY), nulls

