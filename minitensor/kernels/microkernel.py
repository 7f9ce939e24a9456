"""A register-tile microkernel: the inner loop of every fast matrix product, written in LLVM IR.

How BLAS multiplies matrices fast, in one picture. A tile of C — ROWS rows by VECTORS·W
columns, W the entries in one SIMD register — is kept in registers as ROWS·VECTORS
accumulators, while p runs along the inner dimension:

    for p in range(k):
        b_v  = B[p, j0 + v·W : j0 + (v+1)·W]                       VECTORS loads of W entries
        for i in range(ROWS):
            a = A[i0 + i, p], copied into all W lanes               one load, one broadcast
            acc[i][v] += a · b_v                                    VECTORS fused multiply-adds
    C[i0:i0+ROWS, j0:j0+VECTORS·W] = acc

Each B vector loaded is used ROWS times and each A entry VECTORS·W times, so the loop does
mostly multiply-adds: at 4 × 2 tiles of 16 float32 lanes (AVX-512), 8 FMAs of 16 lanes for 6
loads. A numba loop cannot say this: LLVM's vectoriser works on the innermost loop alone and
does not keep a tile of accumulators in registers across the loop over p (kernels/matmul.py
keeps the loop kernel that shows it). So this one function is written the way a compiler
would lower the loop above: `tile_kernel(rows, vectors)` builds an @intrinsic — a function
numba calls like any other, whose body we emit as LLVM IR with llvmlite — and LLVM turns the
vector types below into SIMD registers and the `llvm.fma` calls into FMA instructions.

Edges: the last tile of a matrix may be short in rows or columns. `rows` and `cols` say how
much of the tile is real; the B loads and C stores of the missing columns are masked (not
read, not written), the missing rows repeat the last real row and are not stored. So any
n × m works, and nothing past the matrices' ends is touched.

The numpy twin is np.matmul (see matmul.py); tests/test_kernels.py compares them.
"""
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# One SIMD register, in bytes: 64 with AVX-512 (zmm), else 32 (AVX's ymm; LLVM splits wider
# vector types into registers of the machine's width, so the IR below is correct anywhere).
VECTOR_BYTES = 64 if llvm.get_host_cpu_features().get("avx512f") else 32

_i1, _i32, _i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)


def _splat(builder, value, lanes):
    """A vector of `lanes` copies of a scalar (insert it in lane 0, then shuffle lane 0 out)."""
    vector = ir.VectorType(value.type, lanes)
    first = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_i32, 0))
    return builder.shuffle_vector(first, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(_i32, lanes), None))


def _address(builder, base, offset_bytes, pointee):
    """A pointer to `pointee` at the integer address base + offset_bytes."""
    return builder.inttoptr(builder.add(base, offset_bytes), pointee.as_pointer())


def tile_kernel(rows, vectors):
    """An intrinsic computing one tile C = A · B of at most `rows` × `vectors`·W entries:

        tile(k, a, a_row, a_col, b, b_row, c, c_row, n_rows, n_cols, like)

    k            the inner dimension
    a            address (bytes) of A[0, 0]; A[i, p] is at a + (i·a_row + p·a_col)·itemsize
                 (any strides: A is read one entry at a time)
    b            address of B[0, 0]; B[p, j] at b + (p·b_row + j)·itemsize (rows contiguous)
    c            address of C[0, 0]; C[i, j] at c + (i·c_row + j)·itemsize (overwritten)
    n_rows, n_cols  how much of the tile is real: 1 ≤ n_rows ≤ rows, 1 ≤ n_cols ≤ vectors·W
    like         a scalar of the dtype (float32 or float64), for typing only

    W = VECTOR_BYTES / itemsize (16 float32 or 8 float64 lanes with AVX-512)."""

    @intrinsic
    def tile(typingctx, k, a, a_row, a_col, b, b_row, c, c_row, n_rows, n_cols, like):
        if not isinstance(like, types.Float):
            return None
        signature = types.void(*[types.int64] * 10, like)

        def codegen(context, builder, signature, args):
            k, a, a_row, a_col, b, b_row, c, c_row, n_rows, n_cols, _ = args
            real = context.get_value_type(like)
            itemsize = like.bitwidth // 8
            lanes = VECTOR_BYTES // itemsize
            vector, mask_type = ir.VectorType(real, lanes), ir.VectorType(_i1, lanes)
            item = ir.Constant(_i64, itemsize)
            a_row, a_col, b_row, c_row = (builder.mul(s, item) for s in (a_row, a_col, b_row, c_row))
            align = ir.Constant(_i32, itemsize)

            # which lanes of each column vector are real columns: lane + v·lanes < n_cols
            masks = [builder.icmp_signed("<", ir.Constant(ir.VectorType(_i64, lanes),
                                                          [v * lanes + lane for lane in range(lanes)]),
                                         _splat(builder, n_cols, lanes))
                     for v in range(vectors)]
            masked_load = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vector, [vector.as_pointer(), _i32, mask_type, vector]),
                f"llvm.masked.load.{_vector_name(lanes, like)}.p0")
            masked_store = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [vector, vector.as_pointer(), _i32, mask_type]),
                f"llvm.masked.store.{_vector_name(lanes, like)}.p0")
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.{_vector_name(lanes, like)}")

            # rows past n_rows read the last real row again (in bounds) and are not stored
            last_row = builder.sub(n_rows, ir.Constant(_i64, 1))
            a_rows = [builder.add(a, builder.mul(_min(builder, ir.Constant(_i64, i), last_row), a_row))
                      for i in range(rows)]
            # the accumulators: allocas that LLVM promotes to registers
            acc = [[cgutils.alloca_once_value(builder, ir.Constant(vector, None))
                    for _ in range(vectors)] for _ in range(rows)]
            column_offsets = [ir.Constant(_i64, v * lanes * itemsize) for v in range(vectors)]

            with cgutils.for_range(builder, k) as loop:
                p = loop.index
                b_p = builder.add(b, builder.mul(p, b_row))
                b_vectors = [builder.call(masked_load, [_address(builder, b_p, offset, vector), align,
                                                        mask, ir.Constant(vector, None)])
                             for offset, mask in zip(column_offsets, masks)]
                p_offset = builder.mul(p, a_col)
                for i in range(rows):
                    a_ip = builder.load(_address(builder, a_rows[i], p_offset, real))
                    a_splat = _splat(builder, a_ip, lanes)
                    for v in range(vectors):
                        builder.store(builder.call(fma, [a_splat, b_vectors[v], builder.load(acc[i][v])]),
                                      acc[i][v])

            for i in range(rows):
                with cgutils.if_likely(builder, builder.icmp_signed("<", ir.Constant(_i64, i), n_rows)):
                    c_i = builder.add(c, builder.mul(ir.Constant(_i64, i), c_row))
                    for offset, mask, v in zip(column_offsets, masks, range(vectors)):
                        builder.call(masked_store, [builder.load(acc[i][v]),
                                                    _address(builder, c_i, offset, vector), align, mask])
            return context.get_dummy_value()

        return signature, codegen

    tile.rows, tile.vectors = rows, vectors
    return tile


def _vector_name(lanes, like):
    """LLVM's name for a vector type in intrinsic names: v16f32, v8f64, ..."""
    return f"v{lanes}f{like.bitwidth}"


def _min(builder, x, y):
    """min(x, y) of two signed integers."""
    return builder.select(builder.icmp_signed("<", x, y), x, y)


# ---- packing: an 8 × 8 block transpose in registers ---------------------------------------------

TRANSPOSE_BLOCK = 8


def _swap_blocks(builder, rows, distance):
    """One stage of the in-register transpose: within every 2d × 2d block of the matrix whose
    rows are the vectors `rows` (d = distance), swap the top-right and bottom-left d × d
    blocks. After the stages d = 1, 2, 4 the 8 × 8 matrix is transposed."""
    lanes = len(rows)
    out = list(rows)
    for r in range(lanes):
        if r & distance:
            continue
        upper, lower = rows[r], rows[r + distance]
        # shufflevector(x, y, mask): mask entries < lanes pick from x, the others from y
        keep_upper = [c if not c & distance else lanes + c - distance for c in range(lanes)]
        keep_lower = [c + distance if not c & distance else lanes + c for c in range(lanes)]
        out[r] = builder.shuffle_vector(upper, lower, ir.Constant(ir.VectorType(_i32, lanes),
                                                                  keep_upper))
        out[r + distance] = builder.shuffle_vector(upper, lower,
                                                   ir.Constant(ir.VectorType(_i32, lanes),
                                                               keep_lower))
    return out


@intrinsic
def transpose_block(typingctx, src, src_row, dst, dst_row, n_rows, n_cols, like):
    """dst[j, i] = src[i, j] for a block of n_rows × n_cols ≤ 8 × 8 entries:

        transpose_block(src, src_row, dst, dst_row, n_rows, n_cols, like)

    src, dst are addresses (bytes) of the blocks' first entries, src_row and dst_row their row
    strides in entries (rows contiguous); like a scalar of the dtype. The 8 rows are loaded as
    vectors (masked to n_cols; missing rows are zeros), transposed by three stages of shuffles
    (_swap_blocks), and the first n_cols rows stored (masked to n_rows). This is how B is
    packed when it arrives transposed (kᵀ in q·kᵀ): one entry at a time took a third of the
    whole product's time."""
    if not isinstance(like, types.Float):
        return None
    signature = types.void(*[types.int64] * 6, like)
    lanes = TRANSPOSE_BLOCK

    def codegen(context, builder, signature, args):
        src, src_row, dst, dst_row, n_rows, n_cols, _ = args
        real = context.get_value_type(like)
        itemsize = like.bitwidth // 8
        vector, mask_type = ir.VectorType(real, lanes), ir.VectorType(_i1, lanes)
        name = _vector_name(lanes, like)
        masked_load = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector, [vector.as_pointer(), _i32, mask_type, vector]),
            f"llvm.masked.load.{name}.p0")
        masked_store = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [vector, vector.as_pointer(), _i32, mask_type]),
            f"llvm.masked.store.{name}.p0")
        item, align = ir.Constant(_i64, itemsize), ir.Constant(_i32, itemsize)
        lane_index = ir.Constant(ir.VectorType(_i64, lanes), list(range(lanes)))

        def lanes_below(count):
            return builder.icmp_signed("<", lane_index, _splat(builder, count, lanes))

        zero = ir.Constant(vector, None)
        # rows past n_rows load nothing (an all-false mask) and stay zero
        row_mask, load_mask = lanes_below(n_rows), lanes_below(n_cols)
        rows = []
        for i in range(lanes):
            mask = builder.select(builder.extract_element(row_mask, ir.Constant(_i32, i)),
                                  load_mask, ir.Constant(mask_type, None))
            address = builder.add(src, builder.mul(ir.Constant(_i64, i), builder.mul(src_row, item)))
            rows.append(builder.call(masked_load, [builder.inttoptr(address, vector.as_pointer()),
                                                   align, mask, zero]))
        for distance in (1, 2, 4):
            rows = _swap_blocks(builder, rows, distance)
        for j in range(lanes):
            mask = builder.select(builder.extract_element(load_mask, ir.Constant(_i32, j)),
                                  row_mask, ir.Constant(mask_type, None))
            address = builder.add(dst, builder.mul(ir.Constant(_i64, j), builder.mul(dst_row, item)))
            builder.call(masked_store, [rows[j], builder.inttoptr(address, vector.as_pointer()),
                                        align, mask])
        return context.get_dummy_value()

    return signature, codegen

