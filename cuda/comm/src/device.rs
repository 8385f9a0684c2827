//! What the GPU communicators share: the count that marks a rank's bad input, and a table's
//! columns as addresses and widths, or allocated alike for what comes back.

use joinkit_cuda::cudarc::driver::sys::CUdeviceptr;
use joinkit_cuda::{Backend, Column, ColumnRef, CudaBackend, Result};

/// A count that says "this rank's own input was bad" in a count exchange: every peer fails
/// with it instead of waiting on data that never comes.
pub(crate) const POISON: u64 = u64::MAX;

/// Each column's device address, rows and element width.
pub(crate) fn column_parts(
    columns: &[ColumnRef<'_, CudaBackend>],
) -> Vec<(CUdeviceptr, usize, usize)> {
    columns
        .iter()
        .map(|c| match c {
            ColumnRef::U32(b) => (b.device_ptr(), b.len(), 4),
            ColumnRef::I32(b) => (b.device_ptr(), b.len(), 4),
            ColumnRef::U64(b) => (b.device_ptr(), b.len(), 8),
            ColumnRef::I64(b) => (b.device_ptr(), b.len(), 8),
        })
        .collect()
}

/// Columns of `rows` rows, one of each of `columns`' element types, on `backend`.
pub(crate) fn alloc_like(
    backend: &CudaBackend,
    columns: &[ColumnRef<'_, CudaBackend>],
    rows: usize,
) -> Result<Vec<Column<CudaBackend>>> {
    columns
        .iter()
        .map(|c| {
            Ok(match c {
                ColumnRef::U32(_) => Column::U32(backend.alloc(rows)?),
                ColumnRef::I32(_) => Column::I32(backend.alloc(rows)?),
                ColumnRef::U64(_) => Column::U64(backend.alloc(rows)?),
                ColumnRef::I64(_) => Column::I64(backend.alloc(rows)?),
            })
        })
        .collect()
}
