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
mostly multiply-adds: with the 8 × 1 tiles matmul.py uses, 8 FMAs of 16 float32 lanes
(AVX-512) for 9 loads, and the CPU's FMA units stay busy. A numba loop cannot say this:
LLVM's vectoriser works on the innermost loop alone and does not keep a tile of accumulators
in registers across the loop over p (loop kernels we wrote ran several times slower than
BLAS: benchmarks/README.md, "Figures behind the source's reasoning"). So
this one function is written the way a compiler would lower the loop above:
`tile_kernel(rows, vectors)` builds an @intrinsic — a function numba calls like any other,
whose body we emit as LLVM IR with llvmlite — and LLVM turns the vector types below into
SIMD registers and the `llvm.fma` calls into FMA instructions.

Edges: the last tile of a matrix may be short in rows or columns. `n_rows` and `n_cols` say
how much of the tile is real; the B loads and C stores of the missing columns are masked
(not read, not written), the missing rows repeat the last real row and are not stored. So
any n × m works, and nothing past the matrices' ends is touched. A tile whose columns are all
real takes a copy of the loop with plain loads and stores: on AMD's Zen cores a masked store
is microcoded, many times the cost of a plain one, and masking every tile made a stack of
attention's small matrices (32 × 16 @ 16 × 32) several times slower than its arithmetic
(benchmarks/README.md, "Masks only at the tiles' edges").

The loop wants the rows of B contiguous. In q·kᵀ, B = kᵀ is a transposed view: its columns
are contiguous. `transpose_block` (at the end) packs it, 8 × 8 entries at a time: 8 vector
loads, three rounds of shuffles, 8 vector stores — entry by entry, packing took a third of
the product's time.

The numpy twin is np.matmul (see matmul.py); tests/kernels/test_kernels.py compares them.
"""

import hashlib
from pathlib import Path

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# One SIMD register, in bytes: 64 with AVX-512 (zmm), else 32 (AVX's ymm; LLVM splits wider
# vector types into registers of the machine's width, so the IR below is correct anywhere).
VECTOR_BYTES = 64 if llvm.get_host_cpu_features().get("avx512f") else 32

_i1, _i32, _i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)

# numba's on-disk cache knows a kernel by its name and the file it is written in: a kernel in
# products.py that calls the intrinsics below would be loaded from the cache as it was built
# before this file changed. Its name carries this file's fingerprint instead (products.py,
# tile_stack_kernel), so that a changed microkernel is compiled anew.
SOURCE_STAMP = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:10]


# ---- small IR helpers ------------------------------------------------------------------------


def _const(value):
    """A 64-bit integer constant."""
    return ir.Constant(_i64, value)


def _splat(builder, value, lanes):
    """A vector of `lanes` copies of a scalar (insert it in lane 0, then shuffle lane 0 out)."""
    vector = ir.VectorType(value.type, lanes)
    first = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_i32, 0))
    return builder.shuffle_vector(
        first, ir.Constant(vector, ir.Undefined), ir.Constant(ir.VectorType(_i32, lanes), None)
    )


def _lanes_below(builder, count, lanes, first=0):
    """The mask of lanes whose index first + lane is below `count` (an i64 value)."""
    indices = ir.Constant(ir.VectorType(_i64, lanes), [first + lane for lane in range(lanes)])
    return builder.icmp_signed("<", indices, _splat(builder, count, lanes))


def _pointer(builder, address, pointee):
    """The integer `address` as a pointer to `pointee`."""
    return builder.inttoptr(address, pointee.as_pointer())


def _min(builder, x, y):
    """min(x, y) of two signed integers."""
    return builder.select(builder.icmp_signed("<", x, y), x, y)


class _VectorOps:
    """The LLVM intrinsics on vectors of `lanes` entries of a float type: masked load and
    store (lanes off in the mask are not touched in memory; a masked load gives 0.0 there;
    mask None: a plain load or store of every lane) and fused multiply-add."""

    def __init__(self, builder, like, lanes):
        self.builder = builder
        real = ir.FloatType() if like.bitwidth == 32 else ir.DoubleType()
        self.vector = ir.VectorType(real, lanes)
        self.item = like.bitwidth // 8  # (the vectors' alignment: one entry's)
        self.align = ir.Constant(_i32, self.item)
        mask = ir.VectorType(_i1, lanes)
        name = f"v{lanes}f{like.bitwidth}"  # v16f32, v8f64, ...
        pointer = self.vector.as_pointer()
        declare = lambda ty, fn: cgutils.get_or_insert_function(builder.module, ty, fn)  # noqa: E731
        self._load = declare(
            ir.FunctionType(self.vector, [pointer, _i32, mask, self.vector]),
            f"llvm.masked.load.{name}.p0",
        )
        self._store = declare(
            ir.FunctionType(ir.VoidType(), [self.vector, pointer, _i32, mask]),
            f"llvm.masked.store.{name}.p0",
        )
        self._fma = declare(ir.FunctionType(self.vector, [self.vector] * 3), f"llvm.fma.{name}")

    def load(self, address, mask):
        if mask is None:
            return self.builder.load(_pointer(self.builder, address, self.vector), align=self.item)
        zeros = ir.Constant(self.vector, None)
        return self.builder.call(
            self._load, [_pointer(self.builder, address, self.vector), self.align, mask, zeros]
        )

    def store(self, value, address, mask):
        if mask is None:
            pointer = _pointer(self.builder, address, self.vector)
            self.builder.store(value, pointer, align=self.item)
            return
        self.builder.call(
            self._store, [value, _pointer(self.builder, address, self.vector), self.align, mask]
        )

    def fma(self, a, b, c):
        """a·b + c, lane by lane, rounded once."""
        return self.builder.call(self._fma, [a, b, c])


# ---- the tile ----------------------------------------------------------------------------------


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
        if like not in (types.float32, types.float64):
            return None

        def codegen(context, builder, signature, args):
            k, a, a_row, a_col, b, b_row, c, c_row, n_rows, n_cols, _ = args
            itemsize = like.bitwidth // 8
            lanes = VECTOR_BYTES // itemsize
            ops = _VectorOps(builder, like, lanes)
            # strides in bytes
            a_row, a_col, b_row, c_row = (
                builder.mul(stride, _const(itemsize)) for stride in (a_row, a_col, b_row, c_row)
            )
            # vector v covers columns v·lanes ... v·lanes + lanes − 1: which of them are real
            masks = [_lanes_below(builder, n_cols, lanes, first=v * lanes) for v in range(vectors)]
            column_offsets = [_const(v * lanes * itemsize) for v in range(vectors)]
            # rows past n_rows read the last real row again (in bounds) and are not stored
            last_row = builder.sub(n_rows, _const(1))
            a_rows = [
                builder.add(a, builder.mul(_min(builder, _const(i), last_row), a_row))
                for i in range(rows)
            ]
            # the accumulators, zero: stack slots that LLVM promotes to registers
            acc = [
                [
                    cgutils.alloca_once_value(builder, ir.Constant(ops.vector, None))
                    for _ in range(vectors)
                ]
                for _ in range(rows)
            ]

            def tile_with(b_columns):
                _multiply_add_loop(builder, ops, k, a_rows, a_col, b, b_row, b_columns, acc)
                _store_tile(builder, ops, acc, c, c_row, n_rows, b_columns)

            _whole_or_ragged(builder, n_cols, vectors * lanes, column_offsets, masks, tile_with)
            return context.get_dummy_value()

        return types.void(*[types.int64] * 10, like), codegen

    return tile


def _whole_or_ragged(builder, n_cols, width, column_offsets, masks, emit):
    """emit(b_columns) twice, under a branch on whether all `width` columns of the tile are
    real: there with plain loads and stores (each vector's mask None), else masked (see the
    module docstring). b_columns: each vector's byte offset and mask."""
    full = builder.icmp_signed("==", n_cols, _const(width))
    with builder.if_else(full, likely=True) as (whole, ragged):
        with whole:
            emit([(offset, None) for offset in column_offsets])
        with ragged:
            emit(list(zip(column_offsets, masks)))


def _multiply_add_loop(builder, ops, k, a_rows, a_col, b, b_row, b_columns, acc):
    """The loop over p that keeps the tile in registers: for p in range(k), load row p of B as
    vectors (b_columns: each vector's byte offset and mask of real columns), then for each row i
    add A[i, p]·b_v to acc[i][v]. a_rows are the addresses of A's tile rows; strides in bytes."""
    real, lanes = ops.vector.element, ops.vector.count
    with cgutils.for_range(builder, k) as loop:  # for p in range(k):
        p = loop.index
        b_p = builder.add(b, builder.mul(p, b_row))  # row p of B, as vectors
        b_vectors = [ops.load(builder.add(b_p, offset), mask) for offset, mask in b_columns]
        a_column = builder.mul(p, a_col)
        for i, a_row in enumerate(a_rows):  # A[i, p] in every lane
            a_ip = builder.load(_pointer(builder, builder.add(a_row, a_column), real))
            a_splat = _splat(builder, a_ip, lanes)
            for v, b_v in enumerate(b_vectors):  # acc[i][v] += A[i, p]·b_v
                builder.store(ops.fma(a_splat, b_v, builder.load(acc[i][v])), acc[i][v])


def _store_tile(builder, ops, acc, c, c_row, n_rows, b_columns):
    """C = acc, the real rows only (i < n_rows), each vector's missing columns masked off."""
    for i, acc_i in enumerate(acc):
        with cgutils.if_likely(builder, builder.icmp_signed("<", _const(i), n_rows)):
            c_i = builder.add(c, builder.mul(_const(i), c_row))
            for acc_iv, (offset, mask) in zip(acc_i, b_columns):
                ops.store(builder.load(acc_iv), builder.add(c_i, offset), mask)


# ---- packing: an 8 × 8 block transpose in registers ---------------------------------------------

TRANSPOSE_BLOCK = 8


def _swap_blocks(builder, rows, distance):
    """One stage of the in-register transpose: within every 2d × 2d block of the matrix whose
    rows are the vectors `rows` (d = distance), swap the top-right and bottom-left d × d
    blocks. After the stages d = 1, 2, 4 the 8 × 8 matrix is transposed."""
    lanes = len(rows)
    out = list(rows)
    # shufflevector(x, y, mask): mask entries < lanes pick from x, the others from y
    keep_upper = [c if not c & distance else lanes + c - distance for c in range(lanes)]
    keep_lower = [c + distance if not c & distance else lanes + c for c in range(lanes)]
    as_mask = lambda picks: ir.Constant(ir.VectorType(_i32, lanes), picks)  # noqa: E731
    for r in range(lanes):
        if not r & distance:
            upper, lower = rows[r], rows[r + distance]
            out[r] = builder.shuffle_vector(upper, lower, as_mask(keep_upper))
            out[r + distance] = builder.shuffle_vector(upper, lower, as_mask(keep_lower))
    return out


@intrinsic
def transpose_block(typingctx, src, src_row, dst, dst_row, n_rows, n_cols, like):
    """dst[j, i] = src[i, j] for a block of n_rows × n_cols ≤ 8 × 8 entries:

        transpose_block(src, src_row, dst, dst_row, n_rows, n_cols, like)

    src, dst are addresses (bytes) of the blocks' first entries, src_row and dst_row their row
    strides in entries (rows contiguous); like a scalar of the dtype. The 8 rows are loaded as
    vectors (masked to n_cols; missing rows are zeros), transposed by three stages of shuffles
    (_swap_blocks), and the first n_cols rows stored (masked to n_rows); a whole 8 × 8 block
    without masks."""
    if like not in (types.float32, types.float64):
        return None
    lanes = TRANSPOSE_BLOCK

    def codegen(context, builder, signature, args):
        src, src_row, dst, dst_row, n_rows, n_cols, _ = args
        itemsize = like.bitwidth // 8
        ops = _VectorOps(builder, like, lanes)
        row_mask, column_mask = (_lanes_below(builder, count, lanes) for count in (n_rows, n_cols))
        no_lanes = ir.Constant(row_mask.type, None)

        def row_address(base, row_stride, i):
            return builder.add(base, builder.mul(_const(i * itemsize), row_stride))

        def transpose(load_mask, store_mask):
            rows = [ops.load(row_address(src, src_row, i), load_mask(i)) for i in range(lanes)]
            for distance in (1, 2, 4):
                rows = _swap_blocks(builder, rows, distance)
            for j in range(lanes):
                ops.store(rows[j], row_address(dst, dst_row, j), store_mask(j))

        def row_i_if_real(i):  # row i's real columns, if it is real (else none: it reads 0)
            real_row = builder.extract_element(row_mask, ir.Constant(_i32, i))
            return builder.select(real_row, column_mask, no_lanes)

        def row_j_if_real(j):  # row j of the transpose, if column j was real
            real_column = builder.extract_element(column_mask, ir.Constant(_i32, j))
            return builder.select(real_column, row_mask, no_lanes)

        full = builder.and_(
            builder.icmp_signed("==", n_rows, _const(lanes)),
            builder.icmp_signed("==", n_cols, _const(lanes)),
        )
        with builder.if_else(full, likely=True) as (whole, edge):
            with whole:  # a whole block: plain loads and stores (see the module docstring)
                transpose(lambda i: None, lambda j: None)
            with edge:
                transpose(row_i_if_real, row_j_if_real)
        return context.get_dummy_value()

    return types.void(*[types.int64] * 6, like), codegen
