//! What the GPU communicators share: the count that marks a rank's bad input, and a table's
//! columns as addresses and widths, or allocated alike for what comes back.

use joinkit_cuda::cudarc::driver::sys::CUdeviceptr;
use joinkit_cuda::{Backend, Column, ColumnRef, CudaBackend, DeviceBuffer, Element, Error, Result};

use crate::ReceivedColumns;

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

/// The rows of a table's columns, which must all have as many (`parts` as
/// [`column_parts`] gives them).
pub(crate) fn table_rows(parts: &[(CUdeviceptr, usize, usize)]) -> Result<usize> {
    let rows = parts.first().map_or(0, |p| p.1);
    parts.iter().try_for_each(|p| {
        Error::check_len("all_to_all_v_columns: columns of one table", rows, p.1)
    })?;
    Ok(rows)
}

/// The one column of a table a buffer collective moved as one, as the buffer it was.
pub(crate) fn one_column<T: Element>(
    op: &'static str,
    (mut columns, counts): ReceivedColumns<CudaBackend>,
) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
    let recv = columns
        .pop()
        .and_then(|c| T::from_column(c).ok())
        .ok_or_else(|| Error::Corrupt(format!("{op}: the column came back changed")))?;
    Ok((recv, counts))
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
